"""The public URL's rules (``domain/public_url.py``): an http(s) origin, normalised; anything
else refused with what is wrong."""

from __future__ import annotations

import pytest

from cloudlet.domain import public_url


@pytest.mark.parametrize(
    ("given", "base"),
    [
        ("https://cloudlet.example.com", "https://cloudlet.example.com"),
        ("https://cloudlet.example.com/", "https://cloudlet.example.com"),
        ("  HTTP://Cloudlet.Example.COM:8571//  ", "http://cloudlet.example.com:8571"),
        ("http://10.0.0.7:8571", "http://10.0.0.7:8571"),
        ("https://[fd00::7]:9443/", "https://[fd00::7]:9443"),
    ],
)
def test_an_origin_is_the_links_base(given: str, base: str) -> None:
    assert public_url.parse(given) == base


@pytest.mark.parametrize(
    ("given", "why"),
    [
        ("", "empty"),
        ("cloudlet.example.com", "not an http:// or https:// URL"),
        ("ftp://cloudlet.example.com", "not an http:// or https:// URL"),
        ("https://", "names no host"),
        ("https://cloudlet.example.com:port", "not a number"),
        ("https://me:secret@cloudlet.example.com", "user name or password"),
        ("https://cloudlet.example.com?x=1", "query or fragment"),
        ("https://cloudlet.example.com/#top", "query or fragment"),
        ("https://cloudlet.example.com/?", "query or fragment"),
        ("https://cloudlet.example.com/ml/", "path prefix"),
    ],
)
def test_anything_else_is_refused_saying_why(given: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        public_url.parse(given)


def test_the_host_its_certificate_names_and_the_wildcard_binds() -> None:
    assert public_url.host("https://cloudlet.example.com:9443") == "cloudlet.example.com"
    assert public_url.host("https://[fd00::7]:9443") == "fd00::7"
    assert [public_url.is_wildcard(h) for h in ("0.0.0.0", "::", "", "127.0.0.1", "box.lan")] == [
        True,
        True,
        True,
        False,
        False,
    ]


# Behind a reverse proxy the studio's pages come from the public URL, whatever Host the proxy
# passes on: a browser's Origin naming it is the server's own.
@pytest.mark.parametrize(
    ("public", "origin", "same"),
    [
        ("https://cloudlet.example.com", "https://cloudlet.example.com", True),
        ("https://cloudlet.example.com", "https://Cloudlet.Example.com:443", True),
        ("https://cloudlet.example.com:443", "https://cloudlet.example.com", True),
        ("https://cloudlet.example.com:9443", "https://cloudlet.example.com:9443", True),
        ("https://cloudlet.example.com:9443", "https://cloudlet.example.com", False),
        ("https://cloudlet.example.com", "http://cloudlet.example.com", False),
        ("https://cloudlet.example.com", "https://cloudlet.example.com.evil.example", False),
        ("https://cloudlet.example.com", "null", False),
        ("https://cloudlet.example.com", "https://cloudlet.example.com:notaport", False),
        ("", "https://cloudlet.example.com", False),  # no public URL: only Host counts
        ("", "", False),
    ],
)
def test_the_public_url_is_its_own_origin(public: str, origin: str, same: bool) -> None:
    assert public_url.is_its_origin(public, origin) is same
