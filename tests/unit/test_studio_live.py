"""The studio's shared live-stream pieces (``studio/live.py``): the event encodings, a fragment
feed and a JSON document feed that send only what changed and end when told, and ``Last-Event-ID`` parsing."""

from __future__ import annotations

import json

from starlette.requests import Request

from cloudlet.domain.errors import not_found
from cloudlet.studio import live


def parsed(chunk: bytes) -> tuple[str, str | None, str]:
    """One encoded event as a browser reads it: (event, id, data with its lines joined)."""
    kind, ident, data = "message", None, []
    assert chunk.endswith(b"\n\n")
    for line in chunk.decode().split("\n")[:-2]:
        field, _, value = line.partition(": ")
        if field == "event":
            kind = value
        elif field == "id":
            ident = value
        else:
            assert field == "data", line
            data.append(value)
    return kind, ident, "\n".join(data)


def test_an_html_event_keeps_every_line_and_a_json_event_is_one_line() -> None:
    markup = "<table>\r\n<tr><td>a</td></tr>\r<tr><td>data: b</td></tr>\n</table>"
    assert parsed(live.html_event("rows", markup)) == (
        "rows",
        None,
        "<table>\n<tr><td>a</td></tr>\n<tr><td>data: b</td></tr>\n</table>",
    )
    kind, ident, data = parsed(live.event("log", {"text": "one\ntwo\n"}, 42))
    assert (kind, ident, json.loads(data)) == ("log", "42", {"text": "one\ntwo\n"})


def test_a_fragment_feed_sends_what_changed_and_ends_when_final_or_gone() -> None:
    shown = iter([("<p>1</p>", False), ("<p>1</p>", False), ("<p>2</p>", False), ("<p>3</p>", True)])
    feed = live.FragmentFeed("status", lambda: next(shown))
    first = feed.poll()
    assert [parsed(e)[2] for e in first.events] == ["<p>1</p>"] and not first.done
    assert feed.poll().events == []  # the same markup: nothing sent
    assert [parsed(e)[2] for e in feed.poll().events] == ["<p>2</p>"]
    last = feed.poll()
    assert [parsed(e)[:2] for e in last.events] == [("status", None), ("end", None)] and last.done

    def gone() -> tuple[str, bool]:
        raise not_found("Compute", "c1")

    ended = live.FragmentFeed("status", gone).poll()
    assert ended.done and parsed(ended.events[0])[0] == "end"
    assert "c1" in json.loads(parsed(ended.events[0])[2])["reason"]


def test_a_json_feed_sends_a_changed_document_and_ends_when_final_or_gone() -> None:
    documents = iter([({"a": 1}, False), ({"a": 1}, False), ({"a": 2}, False), ({"a": 2}, True)])
    feed = live.JsonFeed("graph", lambda: next(documents))
    first = feed.poll()
    assert [(parsed(e)[0], json.loads(parsed(e)[2])) for e in first.events] == [("graph", {"a": 1})]
    assert feed.poll().events == []  # the same document: nothing sent
    assert [json.loads(parsed(e)[2]) for e in feed.poll().events] == [{"a": 2}]
    last = feed.poll()  # final, unchanged: only the end
    assert [parsed(e)[0] for e in last.events] == ["end"] and last.done

    def gone() -> tuple[dict[str, int], bool]:
        raise not_found("Job", "p1")

    ended = live.JsonFeed("graph", gone).poll()
    assert ended.done and parsed(ended.events[0])[0] == "end" and "p1" in parsed(ended.events[0])[2]


def test_last_event_id_is_a_bounded_number_or_none() -> None:
    def request(value: str) -> Request:
        return Request({"type": "http", "headers": [(b"last-event-id", value.encode())], "query_string": b""})

    assert live.last_event_id(request("1234"), 10_000) == 1234
    assert live.last_event_id(request("99999"), 10_000) is None
    assert live.last_event_id(request("-1"), 10_000) is None
    assert live.last_event_id(request("abc"), 10_000) is None
    assert live.last_event_id(Request({"type": "http", "headers": [], "query_string": b""}), 10_000) is None
    in_query = Request({"type": "http", "headers": [], "query_string": b"last_event_id=77"})
    assert live.last_event_id(in_query, 10_000) == 77
