"""What an HTTP request to `/slack/events` must pass before Bolt parses any of it.

Bolt builds its request object (parsing the body) before it verifies the signature, reads the
timestamp header with `int()` inside its verification middleware, and its context builders
and listener matchers index into the payload assuming Slack's shapes. Left to Bolt, a
non-numeric timestamp, bad JSON or a list where Slack sends an object is a 500 with a
traceback in the log — and the timestamp case needs no secret, so anyone who can reach the URL
can fill the log. So the route runs these checks first, on the raw bytes:

1. `check_signature` — the timestamp header is ASCII digits within 5 minutes of now and the
   signature is `v0=` + HMAC-SHA256(secret, `v0:{ts}:{body}`); anything else is 401. The reason
   is only for a debug line: nothing an unauthenticated sender does reaches the log above that.
2. `check_payload` — only for a signed request: the body is UTF-8, JSON (an object nested at
   most `MAX_DEPTH` deep) or strict form encoding (with its `payload` field such a JSON object),
   and every field Bolt or `events.py` dereferences has the type Slack gives it. Anything else
   is 400 with the reason: the request really came from Slack (or whoever holds the secret), so
   it is worth one warning line.

Bolt's own verification still runs afterwards and can only agree. Slack's field types are
checked where Bolt reads them (the envelope, `event`, `event.message`, `actions[*]`, `view`,
`authorizations[*]`, ...), not in the free-form rest (blocks, files, profiles).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl

from gateway.core.jsontext import BadJson, parse_json

MAX_SKEW_S = 300  # Slack's own rule for replayed requests
MAX_DEPTH = 64  # Slack's deepest payloads (blocks in attachments) stay well under this

_TIMESTAMP = re.compile(r"[0-9]{1,15}")
_SLACK_TS = re.compile(r"[0-9]{1,15}(\.[0-9]{1,9})?")

# Where Bolt's extractors and matchers (and `events.py`) read a field, the type Slack sends.
_STRINGS = frozenset(
    {
        "type", "subtype", "command", "callback_id", "action_id", "block_id", "trigger_id",
        "response_url", "challenge", "token", "event_id", "api_app_id", "team_id", "user_id",
        "channel_id", "enterprise_id", "context_team_id", "context_enterprise_id", "event_ts",
        "channel_type", "bot_id", "function_execution_id", "bot_access_token", "ts", "thread_ts",
    }
)  # fmt: skip
_SLACK_TIMES = frozenset({"ts", "thread_ts"})
_IDS = frozenset({"team", "enterprise", "user", "channel"})  # a string, or an object with an id
_OBJECTS = frozenset(
    {"event", "view", "message", "previous_message", "item", "assistant_thread", "function_data"}
)
_OBJECT_LISTS = frozenset({"authorizations", "actions", "response_urls"})
_BY_CALLBACK_ID = frozenset(
    {
        "interactive_message", "dialog_submission", "dialog_cancellation", "dialog_suggestion",
        "workflow_step_edit", "shortcut", "message_action",
    }
)  # fmt: skip
_WRITTEN_EVENTS = frozenset({"message", "app_mention"})


class Rejected(Exception):
    """The request fails a check: answer `status`; `reason` is for the log, not the sender."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


def check_signature(headers: Mapping[str, str], body: bytes, *, secret: str, now_s: float) -> None:
    """Raise `Rejected(401)` unless Slack signed this body within the last five minutes."""
    timestamp = headers.get("x-slack-request-timestamp", "")
    signature = headers.get("x-slack-signature", "")
    if not _TIMESTAMP.fullmatch(timestamp):
        raise Rejected(401, "missing or non-numeric X-Slack-Request-Timestamp")
    if abs(now_s - int(timestamp)) > MAX_SKEW_S:
        raise Rejected(401, "stale X-Slack-Request-Timestamp")
    base = b"v0:" + timestamp.encode() + b":" + body
    expected = b"v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest().encode()
    if not hmac.compare_digest(expected, signature.encode("utf-8", "replace")):
        raise Rejected(401, "bad X-Slack-Signature")


def check_payload(body: bytes, content_type: str | None) -> str:
    """The body as text for Bolt, or `Rejected(400)` if it is not a payload Slack would send.

    JSON or form is decided as Bolt decides it (the content type, or a body starting with
    `{`), so what is checked is what Bolt will parse.
    """
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise Rejected(400, "body is not UTF-8") from None
    if content_type == "application/json" or text.startswith("{"):
        payload = _json_object(body)
    else:
        payload = _form(text)
    _check_object(payload, "")
    _check_kind(payload)
    return text


def check_envelope_payload(payload: object) -> None:
    """A Socket Mode envelope's payload (already parsed by the SDK), checked as `check_payload`
    checks an HTTP body: `Rejected` if Bolt would fail on it."""
    if not isinstance(payload, dict):
        raise Rejected(400, "envelope payload is not an object")
    _check_object(payload, "")
    _check_kind(payload)


def _json_object(raw: bytes) -> dict[str, Any]:
    try:
        value = parse_json(raw, max_depth=MAX_DEPTH)
    except BadJson as exc:
        raise Rejected(400, f"JSON body {exc}") from None
    if not isinstance(value, dict):
        raise Rejected(400, "JSON body is not an object")
    return value


def _form(text: str) -> dict[str, Any]:
    try:
        fields = dict(parse_qsl(text, keep_blank_values=True, strict_parsing=True, errors="strict"))
    except ValueError:
        raise Rejected(400, "malformed form encoding") from None
    if "payload" in fields:
        return _json_object(fields["payload"].encode())
    return fields


def _check_object(obj: dict[str, Any], where: str) -> None:
    for key, value in obj.items():
        path = f"{where}{key}"
        if key in _STRINGS:
            if value is not None and not isinstance(value, str):
                raise Rejected(400, f"{path} is not a string")
            if key in _SLACK_TIMES and value is not None and not _SLACK_TS.fullmatch(value):
                raise Rejected(400, f"{path} is not a Slack timestamp")
        elif key in _IDS:
            if isinstance(value, dict):
                if not isinstance(value.get("id", ""), str | None):
                    raise Rejected(400, f"{path}.id is not a string")
            elif value is not None and not isinstance(value, str):
                raise Rejected(400, f"{path} is neither a string nor an object")
        elif key in _OBJECTS:
            if isinstance(value, dict):
                _check_object(value, f"{path}.")
            elif value is not None or key == "event":
                raise Rejected(400, f"{path} is not an object")
        elif key in _OBJECT_LISTS:
            if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
                raise Rejected(400, f"{path} is not a list of objects")
            for index, item in enumerate(value):
                _check_object(item, f"{path}[{index}].")


def _check_kind(payload: dict[str, Any]) -> None:
    """The fields each kind of payload needs (Bolt indexes them without looking)."""
    kind = payload.get("type")
    if kind is None and "command" not in payload and payload.get("ssl_check") != "1":
        raise Rejected(400, "neither a typed payload nor a slash command")
    if kind == "event_callback":
        event = payload.get("event")
        if not isinstance(event, dict) or not isinstance(event.get("type"), str):
            raise Rejected(400, "event_callback without an event type")
        if event["type"] in _WRITTEN_EVENTS and not isinstance(event.get("text", ""), str):
            raise Rejected(400, "event.text is not a string")
    elif kind == "url_verification":
        if not isinstance(payload.get("challenge"), str):
            raise Rejected(400, "url_verification without a challenge")
    elif kind == "block_actions":
        actions = payload.get("actions")
        if not actions or not all(isinstance(a.get("action_id"), str) for a in actions):
            raise Rejected(400, "block_actions without action ids")
    elif kind == "block_suggestion":
        if not isinstance(payload.get("action_id"), str):
            raise Rejected(400, "block_suggestion without an action_id")
    elif kind in ("view_submission", "view_closed"):
        view = payload.get("view")
        if not isinstance(view, dict) or not isinstance(view.get("callback_id"), str):
            raise Rejected(400, f"{kind} without a view callback_id")
        if not isinstance(view.get("type"), str):  # Bolt reads it (a workflow step's save?)
            raise Rejected(400, f"{kind} without a view type")
    elif kind in _BY_CALLBACK_ID and not isinstance(payload.get("callback_id"), str):
        raise Rejected(400, f"{kind} without a callback_id")
