"""Request bodies, bounded before they are used (pure).

One place for every gpusessions route (the hub's API, the culler's actions, the notebook
extension): a body is refused past `MAX_BODY_BYTES` (from its Content-Length and from what
arrived), its JSON past `MAX_DEPTH` levels of nesting (counted before the parser runs, so a
20,000-deep body is a 400, not a RecursionError), and NaN and Infinity are not JSON here.
Each refusal is a `BadBody` whose `status` (400 or 413) and message the handler answers.
"""

from __future__ import annotations

import json
import math
from typing import Any

MAX_BODY_BYTES = 64 * 1024  # the default of every route's limit (a setting where one is configured)
MAX_DEPTH = 32  # no gpusessions body nests deeper than 4 levels


class BadBody(ValueError):
    """A body refused before use: `status` (400 or 413) and the message in words."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def check_size(content_length: str | None, received: int, limit: int = MAX_BODY_BYTES) -> None:
    """413 when the declared (Content-Length) or received length is over `limit` bytes."""
    if max(declared_length(content_length), received) > limit:
        raise BadBody(413, f"The request body is too large: at most {limit // 1024} KiB is accepted.")


def declared_length(content_length: str | None) -> int:
    """The Content-Length a request declares (0 without one); a 400 when it is not a number."""
    if not content_length:
        return 0
    try:
        return int(content_length)
    except ValueError:
        raise BadBody(400, "The Content-Length header is not a number.") from None


def start_streamed(request: Any, limit: int) -> None:
    """Begin a streamed body (a tornado handler with `stream_request_body`, from `prepare`):
    the connection is told to take at most `limit` bytes (tornado cuts a chunked body past it:
    400, connection closed), the body starts empty for `data_received` to fill, and a larger
    declared Content-Length is a `BadBody` (413) before a byte of it is read."""
    connection = getattr(request, "connection", None)
    if connection is not None and hasattr(connection, "set_max_body_size"):
        connection.set_max_body_size(limit)
    request.body = b""
    check_size(request.headers.get("Content-Length"), 0, limit)


def depth(text: str) -> int:
    """The deepest nesting of arrays and objects in a JSON text (brackets inside strings do not
    count); the text need not be valid JSON."""
    deepest = level = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            level += 1
            deepest = max(deepest, level)
        elif ch in "]}":
            level -= 1
    return deepest


def _no_constant(name: str) -> Any:
    raise BadBody(400, f"The request's JSON has {name}, which is not a number here: give a finite number.")


def parse_json(
    body: bytes | None,
    *,
    empty: Any = None,
    limit: int = MAX_BODY_BYTES,
    max_depth: int = MAX_DEPTH,
) -> Any:
    """The JSON of a request body, checked: its size, its nesting depth, no NaN or Infinity,
    and no float that overflows (1e400). An empty body is `empty` ({} when None is given)."""
    check_size(None, len(body or b""), limit)
    if not body or not body.strip():
        return {} if empty is None else empty
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise BadBody(400, "The request body is not UTF-8 text.") from None
    if depth(text) > max_depth:
        raise BadBody(400, f"The request's JSON nests deeper than {max_depth} levels.")
    try:
        value = json.loads(text, parse_constant=_no_constant, parse_float=_finite_float)
    except BadBody:
        raise
    except ValueError as e:
        raise BadBody(400, f"The request body is not JSON ({e}).") from None
    return value


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise BadBody(
            400, f"The request's JSON has the number {text[:20]}, too large to be a time or amount."
        )
    return value


def parse_json_object(body: bytes | None, **kw: Any) -> dict[str, Any]:
    """`parse_json`, and the value must be an object (a list or a string is a 400)."""
    value = parse_json(body, **kw)
    if not isinstance(value, dict):
        raise BadBody(400, f"The request body must be a JSON object, not {type(value).__name__}.")
    return value
