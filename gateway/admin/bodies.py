"""Reading what an admin API request carries — its JSON body and its `user` query — into
validated values, or an `ApiError` that is always a 4xx with field errors.

The order matters because each step protects the next: the size cap (413) before reading,
then strict, depth-limited JSON (`gateway.core.jsontext`: 400 for bad UTF-8, `NaN`, lone
surrogates SQLite could not store, or nesting past `MAX_DEPTH` — which would otherwise be a
`RecursionError`, i.e. a 500), then the pydantic model (422). The detail of every
error is a list of `{"field", "message"}`; `field` is `body` when the problem is the whole
body. No exception text of the parser or validator input is echoed beyond pydantic's messages.
"""

from __future__ import annotations

import re
from typing import Any

from aiohttp import web
from pydantic import BaseModel, ValidationError

from gateway.admin.schema import KEY_PATTERN
from gateway.core.jsontext import BadJson, parse_json

MAX_BODY = 64 * 1024
MAX_DEPTH = 32  # the bodies are flat; this only keeps the parser's recursion bounded

_KEY = re.compile(KEY_PATTERN)


class ApiError(Exception):
    def __init__(self, status: int, error: str, detail: Any = None) -> None:
        super().__init__(error)
        self.status, self.error, self.detail = status, error, detail


def _body_error(status: int, error: str, message: str) -> ApiError:
    return ApiError(status, error, [{"field": "body", "message": message}])


def plain(request: web.Request) -> str | None:
    """Why the body cannot be read as sent, or None. The server does not decompress
    (`auto_decompress=False`: a body that claims gzip but is not, or brotli without the
    library, broke inside aiohttp with a 500 or a bare 400 before any route or token check),
    and no client of this API needs to compress a body of at most 64 KiB."""
    encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding in ("", "identity"):
        return None
    return f"Content-Encoding {encoding[:40]!r} is not accepted: send the body uncompressed"


async def read_body(request: web.Request, model: type[BaseModel]) -> BaseModel:
    if (refused := plain(request)) is not None:
        raise _body_error(400, "compressed body", refused)
    too_large = f"the limit is {MAX_BODY} bytes"
    if request.content_length is not None and request.content_length > MAX_BODY:
        raise _body_error(413, "body too large", too_large)
    raw = await request.content.read(MAX_BODY + 1)
    if len(raw) > MAX_BODY:
        raise _body_error(413, "body too large", too_large)
    try:
        data = parse_json(raw or b"{}", max_depth=MAX_DEPTH)
    except BadJson as exc:
        raise _body_error(400, "malformed JSON", str(exc)) from None
    try:  # strict: a number is not a string, `true` is not a number
        return model.model_validate(_integral_floats(data), strict=True)
    except ValidationError as exc:
        fields = [
            {"field": ".".join(str(p) for p in e["loc"]) or "body", "message": e["msg"]}
            for e in exc.errors(include_url=False)
        ]
        raise ApiError(422, "invalid request", fields) from None


def _integral_floats(value: Any) -> Any:
    """7.0 as 7: JSON Schema counts it as an integer, strict pydantic would not (a float
    field takes the int as it is). The recursion is bounded by `MAX_DEPTH`."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _integral_floats(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_integral_floats(v) for v in value]
    return value


def query_user(request: web.Request, *, required: bool) -> str | None:
    """The `user` query parameter: a user key (as the document's pattern says) or None."""
    user = request.query.get("user")
    if user is None and required:
        raise ApiError(422, "invalid request", [{"field": "user", "message": "required"}])
    if user is not None and not _KEY.fullmatch(user):
        raise ApiError(
            422,
            "invalid request",
            [{"field": "user", "message": "a user key such as telegram:12345"}],
        )
    return user
