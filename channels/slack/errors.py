"""slack_sdk's and aiohttp's errors in our tree, mapped in one place (as httpx maps httpcore's).

Every Slack call of the channel runs inside one of these blocks, and each raises our error
`from` the original:

- `map_send_errors()` — chat.postMessage and the slash command's response_url: a 429 (or
  `ratelimited`) is `DeliveryTransient` with its Retry-After (delivery decides whether to wait
  in the turn or leave it to the background resend), a channel we cannot post to is
  `ChatUnreachable`, a 5xx is `DeliveryTransient`, anything else Slack refused is
  `DeliveryPermanent`. Sent or not: a connection that was never made (`ClientConnectorError`,
  a connect timeout) proves nothing left — `DeliveryTransient`; a disconnect, reset or timeout
  once connected may have delivered the message — `DeliveryUncertain`, never resent.
  `check_respond_status` does the same for the HTTP status the response_url answered with.
- `map_link_errors(call, token)` — auth.test and apps.connections.open: a rejected token is
  `FatalChannelError`; any other failure is `ChannelUnavailable` for the app's supervisor to
  retry with backoff.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import aiohttp
from slack_sdk.errors import SlackApiError, SlackClientError

from gateway.core.errors import (
    ChannelUnavailable,
    ChatUnreachable,
    DeliveryError,
    DeliveryPermanent,
    DeliveryTransient,
    DeliveryUncertain,
    FatalChannelError,
)

# aiohttp errors raised before any byte of the request left: retrying cannot post it twice.
NOT_SENT = (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError)

_BAD_TOKEN = frozenset(
    {"invalid_auth", "not_authed", "account_inactive", "token_revoked", "token_expired"}
)
_UNREACHABLE = frozenset(
    {"channel_not_found", "not_in_channel", "is_archived", "user_disabled", "cannot_dm_bot"}
)


@contextmanager
def map_send_errors() -> Iterator[None]:
    try:
        yield
    except SlackApiError as exc:
        raise _refused(exc) from exc
    except NOT_SENT as exc:
        raise DeliveryTransient(f"slack: not sent ({type(exc).__name__})") from exc
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise DeliveryUncertain(
            f"slack: {type(exc).__name__}; the message may have been sent"
        ) from exc
    except Exception as exc:
        raise DeliveryPermanent(f"slack error: {type(exc).__name__}") from exc


def check_respond_status(status: int) -> None:
    """The response_url answers with a bare HTTP status, not an API error."""
    if status == 429 or status >= 500:
        raise DeliveryTransient(f"slack response_url answered HTTP {status}")
    if status >= 400:
        raise DeliveryPermanent(f"slack response_url answered HTTP {status}")


@contextmanager
def map_link_errors(call: str, token: str) -> Iterator[None]:
    """`token` names the secret `call` authenticates with, for the operator to check."""
    try:
        yield
    except SlackApiError as exc:
        code = _code(exc)
        if code in _BAD_TOKEN:
            raise FatalChannelError(
                f"Slack rejected {token} ({call}: {code}): check the token"
            ) from exc
        raise ChannelUnavailable(f"slack {call} failed: {code}") from exc
    except (SlackClientError, aiohttp.ClientError, TimeoutError) as exc:
        raise ChannelUnavailable(f"slack {call} failed: {type(exc).__name__}") from exc


def _refused(exc: SlackApiError) -> DeliveryError:
    code = _code(exc)
    status = exc.response.status_code
    if status == 429 or code == "ratelimited":
        headers = exc.response.headers
        retry = headers.get("Retry-After") or headers.get("retry-after")
        return DeliveryTransient("slack rate limit", retry_after_s=_seconds(retry))
    if code in _UNREACHABLE:
        return ChatUnreachable(f"slack: {code}")
    if status >= 500:
        return DeliveryTransient(f"slack server error HTTP {status}")
    return DeliveryPermanent(f"slack rejected the message: {code or status}")


def _code(exc: SlackApiError) -> str:
    return str(exc.response.get("error", ""))


def _seconds(value: object) -> float | None:
    try:
        return float(str(value)) if value is not None else None
    except ValueError:
        return None
