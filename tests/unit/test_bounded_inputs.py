"""Bounded inputs (issue 30): request bodies, job input paths, log tails, the session count."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from tornado import httpserver, netutil, web

from gpusessions.core import bodies
from gpusessions.core import jobs as J
from gpusessions.hub.admission import user_sessions
from gpusessions.hub.jobs import log_tail


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        (b"[" * 20000 + b"]" * 20000, 400, "nests deeper than 32 levels"),
        (b'{"until": NaN}', 400, "has NaN"),
        (b'{"until": Infinity}', 400, "has Infinity"),
        (b'{"until": 1e400}', 400, "too large"),
        (b"not json", 400, "not JSON"),
        (b"\xff\xfe", 400, "not UTF-8"),
        (b'{"a": "' + b"x" * (64 * 1024) + b'"}', 413, "at most 64 KiB"),
    ],
)
def test_a_bad_body_is_refused_in_words_before_use(body: bytes, status: int, words: str) -> None:
    with pytest.raises(bodies.BadBody) as e:
        bodies.parse_json(body)
    assert e.value.status == status and words in str(e.value)


def test_a_good_body_parses_and_brackets_in_strings_do_not_count() -> None:
    assert bodies.parse_json(b"") == {}
    assert bodies.parse_json(b'{"a": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["}') == {"a": "[" * 40}
    assert bodies.parse_json(b'{"a": "\\"[[["}', max_depth=1) == {"a": '"[[['}
    assert bodies.depth('{"a": [[1], {"b": []}]}') == 4
    with pytest.raises(bodies.BadBody, match="must be a JSON object, not list"):
        bodies.parse_json_object(b"[1]")


def test_the_declared_length_is_checked_before_the_body() -> None:
    with pytest.raises(bodies.BadBody) as e:
        bodies.check_size("8000000", 0)
    assert e.value.status == 413
    with pytest.raises(bodies.BadBody, match="not a number"):
        bodies.check_size("lots", 0)
    bodies.check_size("100", 100)


@pytest.mark.parametrize(
    ("path", "words"),
    [
        ("-y.ipynb", "starts with '-'"),
        ("--cwd=/tmp/x.ipynb", "starts with '-'"),
        ("./-x.ipynb", "starts with '-'"),
        ("$(HOME).ipynb", "Kubernetes would expand"),
        ("a/$(JUPYTERHUB_API_TOKEN)/b.ipynb", "Kubernetes would expand"),
    ],
)
def test_job_inputs_a_command_line_would_misread_are_refused(path: str, words: str) -> None:
    with pytest.raises(J.InvalidJob, match=words.replace("(", r"\(").replace("$", r"\$")):
        J.check_request({"name": "n", "input": path, "size": "cpu"})


def test_a_parameters_dollar_reaches_papermill_as_written() -> None:
    req = J.check_request(
        {"name": "n", "input": "a/x-y.ipynb", "size": "cpu", "parameters": {"p": "$(HOME)"}}
    )
    argv = J.papermill_argv(req, "abc")
    assert argv[1] == "a/x-y.ipynb" and json.loads(argv[-1].replace("$$", "$")) == {"p": "$(HOME)"}
    assert "$$(HOME)" in argv[-1]


class _Logs:
    """A pod's log as the kubelet cuts it: tailLines, then limitBytes (the start of those)."""

    def __init__(self, lines: list[str]):
        self.lines = lines
        self.asked: list[int] = []

    async def pod_log(self, ns: str, pod: str, container: str, tail: int, limit: int) -> str:
        self.asked.append(tail)
        return "".join(self.lines[-tail:])[:limit]


def test_a_long_log_is_read_as_its_tail_within_the_byte_limit() -> None:
    api = _Logs([f"line {i:04d} " + "x" * 90 + "\n" for i in range(500)])  # 100 bytes a line
    text, cut = asyncio.run(log_tail(api, "ns", "p", 500, 2048))
    assert cut and text is not None and len(text.encode()) <= 2048
    assert text.endswith("line 0499 " + "x" * 90 + "\n")  # the end, not the start
    short = _Logs(["a\n", "b\n"])
    assert asyncio.run(log_tail(short, "ns", "p", 500, 2048)) == ("a\nb\n", False) and short.asked == [501]
    exact = _Logs([f"{i}\n" for i in range(500)])
    assert asyncio.run(log_tail(exact, "ns", "p", 500, 1 << 20)) == ("".join(exact.lines), False)
    # Cut by its line count alone (10,000 short lines, 500 kept): it says so.
    many = _Logs([f"{i}\n" for i in range(10000)])
    text, cut = asyncio.run(log_tail(many, "ns", "p", 500, 1 << 20))
    assert cut and text is not None and text.splitlines() == [str(i) for i in range(9500, 10000)]
    one = _Logs(["y" * 5000])
    text, cut = asyncio.run(log_tail(one, "ns", "p", 500, 2048))
    assert cut and text == "y" * 2048


def _claim(name: str, user: str, deleting: bool = False) -> dict[str, Any]:
    md: dict[str, Any] = {
        "name": name,
        "namespace": "ns",
        "labels": {"app.kubernetes.io/managed-by": "gpusessions"},
        "annotations": {"gpusessions.io/user": user},
    }
    if deleting:
        md["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    return {"metadata": md}


def test_a_users_sessions_count_across_named_servers() -> None:
    claims = [
        _claim("gpu-a", "a"),
        _claim("gpu-a-two", "a"),
        _claim("gpu-a-old", "a", True),
        _claim("gpu-b", "b"),
    ]
    assert user_sessions(claims, "a", None) == 2
    assert user_sessions(claims, "a", ("ns", "gpu-a")) == 1  # the claim being made is not counted


def _streamed_server() -> tuple[Any, int]:
    """A tornado server whose handler streams its body as the hub's and the notebook
    extension's bases do (core.bodies.start_streamed), with a 1 KiB limit."""

    @web.stream_request_body
    class Echo(web.RequestHandler):
        async def prepare(self) -> None:
            try:
                bodies.start_streamed(self.request, 1024)
            except bodies.BadBody as e:
                raise web.HTTPError(e.status, str(e)) from None

        def data_received(self, chunk: bytes) -> None:
            self.request.body += chunk

        def write_error(self, status_code: int, **kwargs: Any) -> None:
            self.finish(str(kwargs["exc_info"][1].log_message))

        def post(self) -> None:
            self.write(f"got {len(self.request.body)}")

    server = httpserver.HTTPServer(web.Application([(r"/", Echo)]))
    (sock,) = netutil.bind_sockets(0, "127.0.0.1")
    server.add_sockets([sock])
    return server, sock.getsockname()[1]


async def _exchange(port: int, request: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    try:
        return await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()


def test_a_streamed_body_is_refused_before_it_is_read() -> None:
    """An 8 MB declared body is a 413 in words with none of it sent (tornado would otherwise
    wait for, and buffer, all of it); a chunked body past the limit is cut at the limit; one
    within it arrives whole."""

    async def run() -> None:
        server, port = _streamed_server()
        try:
            big = await _exchange(port, b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 8000000\r\n\r\n")
            assert big.startswith(b"HTTP/1.1 413") and b"at most 1 KiB is accepted" in big
            chunk = b"400\r\n" + b"x" * 1024 + b"\r\n"
            head = b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
            chunked = await _exchange(port, head + chunk * 8 + b"0\r\n\r\n")
            assert chunked.startswith(b"HTTP/1.1 400") and b"got" not in chunked
            small = await _exchange(
                port, b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello"
            )
            assert small.startswith(b"HTTP/1.1 200") and small.endswith(b"got 5")
        finally:
            server.stop()

    asyncio.run(run())
