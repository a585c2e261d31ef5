"""The Slack channel: slack-bolt's async app in Socket Mode or mounted on our HTTP server.

`run()` calls `auth.test` first (a bad token is fatal), then either opens the Socket Mode
connection (`connect_async`/`close_async`, never `start_async`) or serves `/slack/events` on the
app's HTTP server. There the headers, signature and body are checked before Bolt parses
anything (`verify.py` in this package: unsigned, forged or stale -> 401, a signed but malformed
body -> 400, nothing runs and no traceback is logged). An event that arrives before the channel
runs (still connecting, or restarting after a failure) is answered 503 with Retry-After, logged
once per such period, so that Slack redelivers it.
Listeners only translate (see `events.py` in this package) and hand the message to the intake,
which saves it before Bolt acks (`process_before_response`): if the vault cannot take it,
the answer is 503 with Retry-After (logged once until an event is taken again) and Slack
redelivers. The router then schedules and tracks the turn, dedupes
(event_id, channel+ts), authorizes and answers. An event that does not translate is saved as
rejected and acked, never retried forever. Catch-all listeners make Bolt ack every other
event, because an unhandled one gets a 404 that Slack keeps retrying.

A click on one of our buttons (`block_actions`, verified like events, through the same route
or socket) is saved as the command it carries, then acked; the command's answer is an ordinary
message in the conversation. A message's buttons become Block Kit under its last chunk.
The slash command (`/iris <sub> [args]`) is acked once saved and its answer goes back through
Bolt's `respond` (the response_url), picked by the reply's `reply_to`; a command replayed
after a restart has no responder, and its answer goes to its user alone (`chat.postEphemeral`),
never to the whole channel. Replies elsewhere are
`chat.postMessage` in the thread. The SDK retries only a connection that was never made;
a 429 surfaces at once as `DeliveryTransient` with its Retry-After, for delivery to wait
briefly or leave to the background resend (the SDK's own handler would sleep out any
Retry-After inside the turn), and the SDK's retry of a dropped connection is off because
the post may already have gone through. Every SDK and aiohttp error is mapped into our tree
by `errors.py` in this package.

Size: a little under 500 lines; the listeners, the verified HTTP route and sending share the
Bolt app, the intake handler, the slash-command responders and health, which one class keeps.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, Self

from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.app.async_app import AsyncApp
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse
from slack_sdk.http_retry.builtin_async_handlers import AsyncConnectionErrorRetryHandler
from slack_sdk.web.async_client import AsyncWebClient

from channels.common import ChunkProgress, chunks_so_far
from gateway.core.clock import wall_ms
from gateway.core.errors import (
    ChannelUnavailable,
    ChatUnreachable,
    DeliveryPermanent,
    FatalChannelError,
    VaultError,
)
from gateway.core.messages import (
    ChannelHealth,
    ChatRef,
    Inbound,
    Outbound,
    RejectedInbound,
    SentReceipt,
    WebRequest,
    WebResponse,
)
from gateway.core.ports import InboundHandler, WebRoute

from .bolt_parts import CheckedSocketHandler, bolt_logger
from .errors import NOT_SENT, check_respond_status, map_link_errors, map_send_errors
from .events import (
    BUTTON_ACTION,
    CHANNEL,
    COMMAND_PREFIX,
    SlackIdentity,
    action_to_inbound,
    button_blocks,
    command_to_inbound,
    command_user,
    event_to_inbound,
    reply_chunks,
    thread_only,
)
from .verify import Rejected, check_payload, check_signature

log = logging.getLogger(__name__)

EVENTS_PATH = "/slack/events"
STARTING = "Iris is starting up — please try again in a moment."
# An event that arrives before the channel runs is answered 503 with this Retry-After: Slack
# treats any failure as "retry later" and redelivers (after ~1 min, then ~5 min).
RETRY_AFTER_S = 60
RETRY_LATER = json.dumps({"error": "starting up, retry later"})
_KEEP = 1000  # pending slash-command responders / partial multi-chunk sends remembered

Respond = Callable[..., Awaitable[Any]]


class SlackChannel:
    def __init__(
        self,
        *,
        bot_token: str,
        mode: str = "socket",
        app_token: str | None = None,
        signing_secret: str | None = None,
        api_url: str = "https://slack.com/api/",
        command: str = "/iris",
        now_ms: Callable[[], int] = wall_ms,
    ) -> None:
        _check_tokens(bot_token, mode, app_token, signing_secret)
        self._mode = mode
        self._app_token = app_token or ""
        self._command = command
        self._now_ms = now_ms
        self._signing_secret = signing_secret or ""
        self._client = AsyncWebClient(
            token=bot_token,
            base_url=api_url,
            retry_handlers=[AsyncConnectionErrorRetryHandler(error_types=list(NOT_SENT))],
        )
        self._app = AsyncApp(
            client=self._client,
            signing_secret=signing_secret or "",
            request_verification_enabled=mode == "http",
            process_before_response=True,
            logger=bolt_logger(),
        )
        self._register_listeners()
        self._me: SlackIdentity | None = None
        self._handler: InboundHandler | None = None
        self._socket: AsyncSocketModeHandler | None = None
        self._responders: OrderedDict[str, Respond] = OrderedDict()
        self._progress = ChunkProgress(_KEEP)
        self._last_inbound_ms: int | None = None
        self._last_ok_ms: int | None = None
        self._detail = "not started"
        self._refused_early = 0  # events answered 503 since the channel last stopped running
        self._intake_failures: set[str] = set()  # logged since the intake last took an event
        self.started = asyncio.Event()

    @property
    def name(self) -> str:
        return CHANNEL

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        return None  # nothing held between calls: the web client opens a session per request

    def command_hint(self, command: str) -> str:
        return f"{self._command} {command}"

    async def typing(self, chat: ChatRef) -> None:
        return None  # bots have no typing indicator in channels or DMs

    def routes(self) -> list[WebRoute]:
        return [WebRoute("POST", EVENTS_PATH, self._events)] if self._mode == "http" else []

    def health(self) -> ChannelHealth:
        connected = self.started.is_set()
        if connected and self._socket is not None:
            client = self._socket.client
            session = client.current_session
            connected = not (client.closed or client.stale or session is None or session.closed)
        return ChannelHealth(
            channel=CHANNEL,
            connected=connected,
            last_inbound_ms=self._last_inbound_ms,
            last_ok_ms=self._last_ok_ms,
            detail=self._detail if connected else f"{self._detail} (disconnected)",
        )

    async def check_credentials(self) -> str:
        me = await self._auth_test()
        return f"bot user {me.user_id}"

    # --- receiving -----------------------------------------------------------------------

    async def run(self, on_inbound: InboundHandler) -> None:
        try:
            self._me = await self._auth_test()
            # Taking events before the socket opens: Slack may deliver what it holds (what a
            # dead leader left unacked) right after its hello.
            self._handler = on_inbound
            if self._mode == "socket":
                self._socket = await self._connect_socket()
            self._detail = self._mode
            self._last_ok_ms = self._now_ms()
            if self._refused_early:
                log.info("slack: running; %d early event(s) were left to Slack's retries",
                         self._refused_early)  # fmt: skip
                self._refused_early = 0
            self.started.set()
            await asyncio.Event().wait()
        except (FatalChannelError, ChannelUnavailable) as exc:
            self._detail = str(exc)  # health says why until the supervisor's restart succeeds
            raise
        finally:
            self.started.clear()
            self._handler = None
            if self._socket is not None:
                await self._socket.close_async()  # type: ignore[no-untyped-call]
                self._socket = None

    async def _auth_test(self) -> SlackIdentity:
        with map_link_errors("auth.test", "SLACK_BOT_TOKEN"):
            result = await self._client.auth_test()
        log.info("slack: connected as %s (%s)", result.get("user"), self._mode)
        return SlackIdentity(user_id=str(result["user_id"]), bot_id=str(result.get("bot_id", "")))

    async def _connect_socket(self) -> AsyncSocketModeHandler:
        handler = CheckedSocketHandler(self._app, self._app_token, web_client=self._client)
        try:
            with map_link_errors("apps.connections.open", "SLACK_APP_TOKEN"):
                await handler.connect_async()  # type: ignore[no-untyped-call]
        except (FatalChannelError, ChannelUnavailable):
            await handler.close_async()  # type: ignore[no-untyped-call]
            raise
        return handler

    def _register_listeners(self) -> None:
        self._app.event("message")(self._on_event)
        self._app.event("app_mention")(self._on_event)
        self._app.event(re.compile(".*"))(self._on_other_event)
        self._app.command(self._command)(self._on_command)
        self._app.action(BUTTON_ACTION)(self._on_button)
        # Other actions, shortcuts and modals are not used; ack them so Slack shows no error.
        anything = re.compile(".*")
        self._app.action(anything)(self._ack_only)
        self._app.shortcut(anything)(self._ack_only)
        self._app.view(anything)(self._ack_only)
        self._app.error(self._on_listener_error)

    async def _on_listener_error(self, error: Exception) -> BoltResponse | None:
        """An event the intake could not take (the vault cannot write, or the channel stopped
        meanwhile): 503 with Retry-After, so Slack redelivers it; logged once until an event
        is taken again. Anything else keeps Bolt's 500, logged with its traceback."""
        if not isinstance(error, VaultError | ChannelUnavailable):
            log.error("slack: a listener failed", exc_info=error)
            return None
        kind = type(error).__name__
        if kind not in self._intake_failures:
            self._intake_failures.add(kind)
            log.warning("slack: could not take an event (%s); answering 503 until it can", error)
        return _retry_later()

    async def _on_event(self, body: dict[str, Any]) -> None:
        self._last_ok_ms = self._now_ms()
        handler, me = self._handler, self._me
        if handler is None or me is None:
            # Raising makes the answer a 503 (`_on_listener_error`): Slack redelivers it.
            raise ChannelUnavailable("slack channel is not running yet")
        try:
            inbound: Inbound | RejectedInbound | None = event_to_inbound(body, me)
        except Exception as exc:  # one odd event must not be retried forever
            inbound = RejectedInbound(
                channel=CHANNEL,
                key=f"slack:event:{body.get('event_id', '?')}",
                reason=f"untranslatable event ({type(exc).__name__})",
                raw=json.dumps(body)[:4000],
            )
        if inbound is not None:
            # Saved before Bolt acks (process_before_response): a VaultError makes it answer
            # 503, so Slack redelivers.
            await self._dispatch(inbound, handler)

    async def _on_other_event(self, body: dict[str, Any]) -> None:
        self._last_ok_ms = self._now_ms()

    async def _ack_only(self, ack: Callable[..., Awaitable[None]]) -> None:
        await ack()

    async def _on_command(
        self, ack: Callable[..., Awaitable[None]], body: dict[str, Any], respond: Respond
    ) -> None:
        handler = self._handler
        if handler is None:
            await ack(text=STARTING)
            return
        self._last_ok_ms = self._now_ms()
        inbound = command_to_inbound(body)
        if inbound is None:
            await ack()
            return
        instead = thread_only(inbound, self._me)
        if instead is not None:  # shown to the user alone; there is nothing to save
            await ack(text=instead)
            return
        self._responders[inbound.message_id] = respond
        while len(self._responders) > _KEEP:
            self._responders.popitem(last=False)
        await self._dispatch(inbound, handler)  # saved first: a failure leaves it unacked
        await ack()  # within Slack's 3 s; the answer follows through `respond`

    async def _on_button(self, ack: Callable[..., Awaitable[None]], body: dict[str, Any]) -> None:
        handler = self._handler
        if handler is None:  # answered 503: Slack shows the click failed, it can be repeated
            raise ChannelUnavailable("slack channel is not running yet")
        self._last_ok_ms = self._now_ms()
        try:
            inbound: Inbound | RejectedInbound | None = action_to_inbound(body)
        except Exception as exc:  # kept with its reason, acked, never retried
            inbound = RejectedInbound(
                channel=CHANNEL,
                key=f"slack:action:{body.get('trigger_id', '?')}",
                reason=f"untranslatable button ({type(exc).__name__})",
                raw=json.dumps(body)[:4000],
            )
        if inbound is not None:
            await self._dispatch(inbound, handler)  # saved first: a failure leaves it unacked
        await ack()

    async def _dispatch(
        self, inbound: Inbound | RejectedInbound, on_inbound: InboundHandler
    ) -> None:
        if isinstance(inbound, Inbound):
            self._last_inbound_ms = self._now_ms()
        await on_inbound([inbound])  # saved, and the turn scheduled; the router tracks it
        self._intake_failures.clear()

    async def _events(self, request: WebRequest) -> WebResponse:
        try:  # before Bolt parses anything (see verify.py in this package)
            body = self._verified_body(request)
        except Rejected as exc:
            error = "invalid request" if exc.status == 401 else "malformed request"
            return WebResponse(
                status=exc.status,
                body=json.dumps({"error": error}),
                content_type="application/json",
            )
        if self._handler is None and _is_event(body):
            return self._not_yet()
        bolt_request = AsyncBoltRequest(
            body=body, query=request.query, headers=dict(request.headers)
        )
        response = await self._app.async_dispatch(bolt_request)
        content_type = (response.headers.get("content-type") or ["text/plain"])[0]
        retry = response.headers.get("retry-after")
        return WebResponse(
            status=response.status,
            body=response.body,
            content_type=content_type.split(";")[0].strip(),
            headers={"Retry-After": retry[0]} if retry else {},
        )

    def _not_yet(self) -> WebResponse:
        """An event before the channel runs (still connecting, or restarting): not taken, so
        Slack must redeliver it — a 503 with Retry-After, logged once per such period instead
        of a 500 and a traceback per event."""
        if not self._refused_early:
            log.warning("slack: events arrive before the channel is running; answering 503 "
                        "so that Slack retries them")  # fmt: skip
        self._refused_early += 1
        return WebResponse(
            status=503,
            body=RETRY_LATER,
            content_type="application/json",
            headers={"Retry-After": str(RETRY_AFTER_S)},
        )

    def _verified_body(self, request: WebRequest) -> str:
        try:
            check_signature(
                request.headers,
                request.body,
                secret=self._signing_secret,
                now_s=self._now_ms() / 1000,
            )
        except Rejected as exc:
            log.debug("slack: refused an unsigned request (%s)", exc.reason)
            raise
        content_type = request.headers.get("content-type", "").split(";")[0] or None
        try:
            return check_payload(request.body, content_type)
        except Rejected as exc:
            log.warning("slack: a signed request was malformed (%s); answered 400", exc.reason)
            raise

    # --- sending -------------------------------------------------------------------------

    async def send(self, out: Outbound) -> SentReceipt:
        chunks = reply_chunks(out.text)
        respond = self._responders.get(out.reply_to or "")
        sent = self._progress.sent(out.idempotency_key, out.sent_chunks)
        private = respond is None and (out.reply_to or "").startswith(COMMAND_PREFIX)
        user = command_user(out.reply_to or "") or ""
        if private and not user and out.chat.chat_id.startswith("D"):
            private = False  # a direct message: posting it shows it to that user alone anyway
        if private and not user:
            # A slash command's answer is the user's alone; with no responder and no user to
            # show it to (saved by an older version), it is dropped rather than posted to all.
            log.warning("slack: a command's answer had no one to show it to; not posted")
            return SentReceipt(platform_message_ids=())
        for index in range(len(sent), len(chunks)):
            with chunks_so_far(sent):
                sent.append(await self._send_chunk(out, chunks, index, respond, user, private))
        self._progress.done(out.idempotency_key)
        return SentReceipt(platform_message_ids=tuple(sent))

    async def _send_chunk(
        self,
        out: Outbound,
        chunks: list[str],
        index: int,
        respond: Respond | None,
        user: str,
        private: bool,
    ) -> str:
        """Chunk `index` of `out`, by the command's responder, to its user alone, or posted."""
        if respond is not None:
            await self._respond(respond, chunks[index])
            return f"respond-{index}"
        if private:  # its responder is gone (a restart): shown to the user alone
            return await self._post_private(out.chat, user, chunks[index])
        last = index == len(chunks) - 1
        blocks = button_blocks(chunks[index], out.buttons) if last else None
        return await self._post(out.chat, chunks[index], blocks)

    async def _post(
        self, chat: ChatRef, text: str, blocks: list[dict[str, Any]] | None = None
    ) -> str:
        with map_send_errors():
            result = await self._client.chat_postMessage(
                channel=chat.chat_id, text=text, thread_ts=chat.thread_id, mrkdwn=True,
                blocks=blocks,
            )  # fmt: skip
        return str(result.get("ts", ""))

    async def _post_private(self, chat: ChatRef, user: str, text: str) -> str:
        try:
            with map_send_errors():
                result = await self._client.chat_postEphemeral(
                    channel=chat.chat_id, user=user, text=text, thread_ts=chat.thread_id,
                    mrkdwn=True,
                )  # fmt: skip
        except ChatUnreachable as exc:
            # Ephemeral posts need the bot in the channel, the slash command did not: the
            # answer is lost, the chat is not (its other messages still reach it).
            raise DeliveryPermanent(f"a command's answer could not be shown: {exc}") from exc
        return str(result.get("message_ts", ""))

    async def _respond(self, respond: Respond, text: str) -> None:
        with map_send_errors():
            result = await respond(text=text, response_type="ephemeral")
        check_respond_status(getattr(result, "status_code", 200))


def _retry_later() -> BoltResponse:
    return BoltResponse(
        status=503,
        body=json.dumps({"error": "not saved, retry later"}),
        headers={"content-type": "application/json", "retry-after": str(RETRY_AFTER_S)},
    )


def _is_event(body: str) -> bool:
    """Whether a verified body is an Events API delivery (not a URL check or a command)."""
    if not body.lstrip().startswith("{"):
        return False
    try:
        parsed = json.loads(body)
    except ValueError:
        return False
    return isinstance(parsed, dict) and parsed.get("type") == "event_callback"


def _check_tokens(
    bot_token: str, mode: str, app_token: str | None, signing_secret: str | None
) -> None:
    if not bot_token.startswith("xoxb-"):
        raise FatalChannelError("SLACK_BOT_TOKEN must be a bot token (it starts with xoxb-)")
    if mode == "socket" and not (app_token or "").startswith("xapp-"):
        raise FatalChannelError(
            "Slack socket mode needs SLACK_APP_TOKEN, an app-level token starting with xapp-"
        )
    if mode == "http" and not signing_secret:
        raise FatalChannelError("Slack http mode needs SLACK_SIGNING_SECRET")
