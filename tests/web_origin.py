"""A web server the tests start, for http(s) job inputs: it serves files over plain HTTP, and as
an HTTPS proxy it answers for named public hosts (``CONNECT`` is terminated with a certificate
of the test's own CA), so a job file that names a real public URL runs as written, offline.

Point agents at it with ``https_proxy`` and trust the CA with ``SSL_CERT_FILE`` (a bundle of the
system's CAs and the test CA, from ``ca_bundle``). Certificates are made with the ``openssl``
command line. Files get an ``ETag`` (their SHA-256); ``If-None-Match`` with it answers 304.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import shutil
import ssl
import subprocess
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from xml.sax.saxutils import escape

SYSTEM_CAS = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt")


@dataclass(frozen=True)
class Served:
    host: str
    path: str
    conditional: bool  # the request carried If-None-Match
    status: int


def _openssl(*args: str, cwd: Path) -> None:
    if shutil.which("openssl") is None:
        raise RuntimeError("the openssl command is needed to make the test CA: apt-get install openssl")
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_certificates(folder: Path, hosts: tuple[str, ...]) -> tuple[Path, Path, Path]:
    """(CA bundle = system CAs + the test CA, leaf certificate, leaf key) for HOSTS."""
    folder.mkdir(parents=True, exist_ok=True)
    _openssl(
        *("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2"),
        *("-keyout", "ca.key", "-out", "ca.pem"),
        *("-subj", "/CN=cloudlet test CA", "-addext", "basicConstraints=critical,CA:TRUE"),
        *("-addext", "keyUsage=critical,keyCertSign,cRLSign"),
        cwd=folder,
    )
    _openssl(
        *("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "leaf.key", "-out", "leaf.csr"),
        *("-subj", f"/CN={hosts[0]}"),
        cwd=folder,
    )
    (folder / "leaf.ext").write_text(
        f"subjectAltName={','.join(f'DNS:{h}' for h in hosts)}\nbasicConstraints=CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n"
        "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid,issuer\n"
    )
    _openssl(
        *("x509", "-req", "-in", "leaf.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial"),
        *("-days", "2", "-out", "leaf.pem", "-extfile", "leaf.ext"),
        cwd=folder,
    )
    system = next((Path(p).read_text() for p in SYSTEM_CAS if Path(p).is_file()), "")
    bundle = folder / "bundle.pem"
    bundle.write_text(system + "\n" + (folder / "ca.pem").read_text())
    return bundle, folder / "leaf.pem", folder / "leaf.key"


@dataclass
class WebOrigin:
    """The server; ``files`` maps a path (``/datasets/iris.csv``) to its bytes."""

    files: dict[str, bytes] = field(default_factory=dict)
    hosts: tuple[str, ...] = ()
    tls: ssl.SSLContext | None = None
    bundle: Path | None = None  # the CA bundle that trusts it (with certificates)
    served: list[Served] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def requests_for(self, path: str) -> list[Served]:
        with self.lock:
            return [s for s in self.served if s.path == path]


def _blob_listing(files: dict[str, bytes], container_path: str, prefix: str) -> bytes:
    """The Blob service's List Blobs answer for a container (the first path segment): the files
    beneath it whose names start with PREFIX, in one page."""
    container = "/" + container_path.strip("/") + "/"
    names = sorted(p[len(container) :] for p in files if p.startswith(container))
    blobs = "".join(
        f"<Blob><Name>{escape(n)}</Name><Properties><Content-Length>{len(files[container + n])}"
        "</Content-Length></Properties></Blob>"
        for n in names
        if n.startswith(prefix)
    )
    return (
        '<?xml version="1.0" encoding="utf-8"?><EnumerationResults '
        f'ContainerName="{escape(container.strip("/"))}"><Prefix>{escape(prefix)}</Prefix>'
        f"<Blobs>{blobs}</Blobs><NextMarker /></EnumerationResults>"
    ).encode()


def _handler(origin: WebOrigin) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        host = "127.0.0.1"

        def log_message(self, format: str, *args: object) -> None:  # the base's parameter names
            pass

        def do_CONNECT(self) -> None:
            host = self.path.rsplit(":", 1)[0]
            if origin.tls is None or host not in origin.hosts:
                self.send_error(502, f"this test proxy answers only for {', '.join(origin.hosts)}")
                return
            self.send_response(200, "Connection established")
            self.end_headers()
            self.wfile.flush()
            conn = origin.tls.wrap_socket(self.connection, server_side=True)
            self.connection, self.host = conn, host
            self.rfile, self.wfile = conn.makefile("rb"), conn.makefile("wb")
            self.close_connection = False  # go on serving requests inside the tunnel

        def do_GET(self) -> None:
            path = self.path
            if "://" in path:  # a plain-HTTP proxy request names the whole URL
                path = "/" + path.split("://", 1)[1].partition("/")[2]
            path, _, query = path.partition("?")
            params = urllib.parse.parse_qs(query)
            if params.get("comp") == ["list"] and params.get("restype") == ["container"]:
                body: bytes | None = _blob_listing(origin.files, path, (params.get("prefix") or [""])[0])
            else:
                body = origin.files.get(path)
            tag = f'"{hashlib.sha256(body).hexdigest()}"' if body is not None else None
            conditional = self.headers.get("If-None-Match")
            status = 404 if body is None else (304 if conditional == tag else 200)
            with origin.lock:
                origin.served.append(Served(self.host, path, conditional is not None, status))
            if body is None:
                self.send_error(404, "Not Found")
                return
            self.send_response(status)
            assert tag is not None
            self.send_header("ETag", tag)
            if status == 304:
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Handler


@contextlib.contextmanager
def web_origin(
    files: dict[str, bytes], certificates: tuple[Path, Path, Path] | None = None, hosts: tuple[str, ...] = ()
) -> Iterator[WebOrigin]:
    """Serve FILES on 127.0.0.1 (a free port) until the block ends; with CERTIFICATES (from
    ``make_certificates``) also as the HTTPS proxy of HOSTS."""
    tls = None
    if certificates is not None:
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(str(certificates[1]), str(certificates[2]))
    origin = WebOrigin(files=files, hosts=hosts, tls=tls)
    origin.bundle = certificates[0] if certificates is not None else None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(origin))
    server.daemon_threads = True
    origin.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, name="web-origin", daemon=True)
    thread.start()
    try:
        yield origin
    finally:
        server.shutdown()
        server.server_close()
