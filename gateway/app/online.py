"""Checking credentials against the real services: `iris doctor --online` and `iris init`.

Each check builds the same adapter `iris run` uses (the Telegram and Slack channels, the
Anthropic client), makes one harmless call (`getMe`, `auth.test`, a 16-token model request)
and reports what the service said, within a time limit. Platform SDKs are imported lazily, as
in `gateway/app/channels.py`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass

from gateway.agent.model_health import MODEL_REFUSED
from gateway.core.errors import (
    ChannelUnavailable,
    FatalChannelError,
    ModelError,
    ModelKeyRejected,
    ModelRejected,
    ModelUnavailable,
)

CHECK_TIMEOUT_S = 15.0


@dataclass(frozen=True, slots=True)
class Check:
    ok: bool
    said: str
    # Not ok because the service could not be reached (the credentials may be fine), rather
    # than because it rejected them.
    unreachable: bool = False

    def line(self, what: str) -> str:
        return f"{what}: {'ok (' + self.said + ')' if self.ok else 'FAILED — ' + self.said}"


async def _within(call: Awaitable[str], timeout_s: float) -> Check:
    try:
        async with asyncio.timeout(timeout_s):
            return Check(True, await call)
    except TimeoutError:
        return Check(False, f"no answer within {timeout_s:g} s", unreachable=True)
    except ModelKeyRejected as exc:
        return Check(False, str(exc))
    except (ChannelUnavailable, ModelUnavailable) as exc:
        return Check(False, str(exc), unreachable=True)
    except (FatalChannelError, ModelError) as exc:
        return Check(False, str(exc))


async def check_telegram(token: str, base_url: str, timeout_s: float = CHECK_TIMEOUT_S) -> Check:
    from channels.telegram import TelegramChannel

    async def call() -> str:
        async with TelegramChannel(token=token, base_url=base_url) as channel:
            return await channel.check_credentials()

    try:
        return await _within(call(), timeout_s)
    except FatalChannelError as exc:  # the constructor refuses a token of the wrong shape
        return Check(False, str(exc))


async def check_slack(
    *,
    bot_token: str,
    api_url: str,
    mode: str,
    app_token: str | None,
    signing_secret: str | None,
    timeout_s: float = CHECK_TIMEOUT_S,
) -> Check:
    from channels.slack import SlackChannel

    try:
        channel = SlackChannel(
            bot_token=bot_token,
            mode=mode,
            app_token=app_token,
            signing_secret=signing_secret,
            api_url=api_url,
        )
    except FatalChannelError as exc:
        return Check(False, str(exc))

    async def call() -> str:
        async with channel:
            return await channel.check_credentials()

    return await _within(call(), timeout_s)


async def check_model(
    *, api_key: str, model: str, base_url: str, timeout_s: float = CHECK_TIMEOUT_S
) -> Check:
    from gateway.agent.anthropic_llm import AnthropicLLM
    from gateway.core.llm import LLMMessage, LLMRequest

    async def call() -> str:
        async with AnthropicLLM(
            api_key=api_key,
            model=model,
            base_url=base_url,
            timeout_s=timeout_s,
            deadline_s=timeout_s,
            max_retries=0,
        ) as llm:
            try:
                await llm.complete(
                    LLMRequest(
                        system_stable="Reply with OK.",
                        messages=(LLMMessage.user("ping"),),
                        max_tokens=16,
                        purpose="doctor",
                    )
                )
            except ModelKeyRejected as exc:
                raise ModelKeyRejected(
                    "API key rejected (HTTP 401): check ANTHROPIC_API_KEY"
                ) from exc
            except ModelRejected as exc:
                if exc.status in MODEL_REFUSED:
                    raise ModelRejected(
                        f"model {model!r}: {MODEL_REFUSED[exc.status]}", status=exc.status
                    ) from exc
                raise
        return model

    return await _within(call(), timeout_s)
