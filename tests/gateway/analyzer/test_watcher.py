import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.analyzer.feature import AnalyzerFeature, format_suggestion
from gateway.analyzer.watcher import WatchState
from gateway.app.app import App
from gateway.app.config import Config
from gateway.core.clock import ManualClock
from gateway.core.errors import ModelRejected
from gateway.core.llm import LLMRequest, LLMResponse, TextPart
from tests.conftest import app_with, make_config
from tests.fakes import FakeLLM, MemoryChannel, inbound
from vault.analyzer import SuggestionCounts

ON_TOPIC = [
    "I want to bake sourdough bread this weekend",
    "My starter is five days old and doubles in about 8 hours",
    "What hydration should I use for a first loaf with bread flour?",
]
SHIFT = "What documents does a freelancer need for a tax return in Spain?"
ANOTHER_SHIFT = "Can you recommend a few science fiction novels for a long flight abroad?"
FRUSTRATED = "No, I said the starter is five days old."
CLEAR_TIP = "It looks like we've moved to a new topic"
COMPACT_TIP = "If I'm getting this wrong"


def tip_of(text: str) -> str | None:
    _, sep, tip = text.partition("\n\n_Tip: ")
    return tip if sep else None


class Harness:
    def __init__(self, app: App, channel: MemoryChannel, clock: ManualClock) -> None:
        self.app, self.channel, self.clock = app, channel, clock

    async def say(self, text: str) -> str:
        await self.app.router.submit(inbound(text))
        return self.channel.texts()[-1]

    async def say_all(self, texts: list[str]) -> list[str]:
        return [await self.say(t) for t in texts]

    async def stats(self) -> dict[str, SuggestionCounts]:
        return await self.app.analyzer_store.stats(self.clock.now_ms())


async def open_app(
    config: Config, llm: FakeLLM | None = None, channel: MemoryChannel | None = None
) -> tuple[App, MemoryChannel, ManualClock]:
    channel = channel or MemoryChannel()
    clock = ManualClock()
    app = app_with(config, channel, llm or FakeLLM(), clock=clock)
    await app.__aenter__()
    return app, channel, clock


@pytest.fixture
async def harness(config: Config) -> AsyncIterator[Harness]:
    app, channel, clock = await open_app(config)
    try:
        yield Harness(app, channel, clock)
    finally:
        await app.__aexit__(None, None, None)


async def test_topic_shift_gets_a_clear_tip_appended_to_the_reply(harness: Harness) -> None:
    replies = await harness.say_all([*ON_TOPIC, SHIFT])
    assert [tip_of(r) for r in replies[:3]] == [None, None, None]
    assert replies[3].startswith("ok\n\n_Tip: " + CLEAR_TIP)
    assert "/clear" in replies[3]


async def test_frustration_gets_a_compact_tip(harness: Harness) -> None:
    replies = await harness.say_all([*ON_TOPIC, FRUSTRATED])
    assert COMPACT_TIP in replies[-1]
    assert "/compact" in replies[-1]


async def test_no_tip_right_after_clear_or_compact(harness: Harness) -> None:
    await harness.say_all(ON_TOPIC)
    await harness.say("/clear")
    replies = await harness.say_all([FRUSTRATED, "ugh, forget it"])
    assert [tip_of(r) for r in replies] == [None, None]
    await harness.say("/compact")
    assert tip_of(await harness.say(FRUSTRATED)) is None


async def test_cooldown_by_messages_and_minutes(harness: Harness) -> None:
    await harness.say_all(ON_TOPIC)
    assert tip_of(await harness.say(FRUSTRATED)) is not None
    for _ in range(8):  # the next 8 messages, however much time passes
        harness.clock.advance(3600)
        assert tip_of(await harness.say(FRUSTRATED)) is None
    assert tip_of(await harness.say(FRUSTRATED)) is not None
    for _ in range(9):  # 9 messages, but all within 30 minutes of the last tip
        harness.clock.advance(60)
        assert tip_of(await harness.say(FRUSTRATED)) is None
    harness.clock.advance(30 * 60)
    assert tip_of(await harness.say(FRUSTRATED)) is not None


async def test_followed_within_two_messages_is_counted(harness: Harness) -> None:
    await harness.say_all([*ON_TOPIC, FRUSTRATED])
    await harness.say("/status")
    await harness.say("/compact")
    stats = await harness.stats()
    assert (stats["24h"].shown_compact, stats["24h"].followed_compact) == (1, 1)
    assert (stats["30d"].shown, stats["30d"].followed) == (1, 1)


async def test_command_after_the_window_or_a_different_one_is_not_followed(
    harness: Harness,
) -> None:
    await harness.say_all([*ON_TOPIC, FRUSTRATED, "/status", "/help", "/compact"])
    await harness.say_all([*ON_TOPIC, SHIFT, "/compact"])  # a clear tip, then /compact
    stats = (await harness.stats())["24h"]
    assert (stats.shown_compact, stats.shown_clear, stats.followed) == (1, 1, 0)


async def test_counters_by_window(harness: Harness) -> None:
    await harness.say_all([*ON_TOPIC, FRUSTRATED])
    harness.clock.advance(2 * 86400)
    stats = await harness.stats()
    assert (stats["24h"].shown, stats["30d"].shown) == (0, 1)


async def test_state_survives_a_restart(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    app, channel, _ = await open_app(config)
    try:
        for text in ON_TOPIC:
            await app.router.submit(inbound(text))
    finally:
        await app.__aexit__(None, None, None)
    app, channel, _ = await open_app(config)
    try:
        await app.router.submit(inbound(SHIFT))
        assert tip_of(channel.texts()[-1]) is not None  # the topic was remembered
        await app.router.submit(inbound(FRUSTRATED))
    finally:
        await app.__aexit__(None, None, None)
    app, channel, _ = await open_app(config)
    try:
        await app.router.submit(inbound(FRUSTRATED))
        assert tip_of(channel.texts()[-1]) is None  # so was the cooldown
    finally:
        await app.__aexit__(None, None, None)


async def test_disabled_analyzer_adds_nothing(tmp_path: Path) -> None:
    app, channel, _ = await open_app(make_config(tmp_path, analyzer={"enabled": False}))
    try:
        assert app.feature(AnalyzerFeature).watcher is None
        for text in [*ON_TOPIC, SHIFT]:
            await app.router.submit(inbound(text))
        assert all(tip_of(t) is None for t in channel.texts())
    finally:
        await app.__aexit__(None, None, None)


class SlackLikeChannel(MemoryChannel):
    def command_hint(self, command: str) -> str:
        return f"/iris {command}"


async def test_tip_uses_the_channels_command_style(tmp_path: Path) -> None:
    channel = SlackLikeChannel()
    app, _, _ = await open_app(make_config(tmp_path), channel=channel)
    try:
        for text in [*ON_TOPIC, SHIFT]:
            await app.router.submit(inbound(text))
        assert "/iris clear" in channel.texts()[-1]
    finally:
        await app.__aexit__(None, None, None)


def test_format_suggestion_per_channel() -> None:
    assert "/compact" in format_suggestion("compact", lambda c: f"/{c}")
    slack = format_suggestion("clear", lambda c: f"/iris {c}")
    assert "/iris clear" in slack
    assert slack.startswith("\n\n_Tip: ")


async def test_analyzer_failure_never_costs_the_reply(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    await harness.say_all(ON_TOPIC)

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug in the analysis")

    monkeypatch.setattr("gateway.analyzer.watcher.analyze", broken)
    assert await harness.say(SHIFT) == "ok"


def test_state_from_unexpected_json_starts_clean() -> None:
    state = WatchState.from_json(
        {"recent": "x", "messages": -3, "last_command": "rm", "last_suggestion_ms": True}
    )
    assert state == WatchState()
    kept = WatchState.from_json({"recent": [["a", 1], "b"], "messages": 4, "followed": True})
    assert (kept.recent, kept.messages, kept.followed) == ([["a"]], 4, True)


# --- confirmation with a cheap model -------------------------------------------------------


async def confirmed(tmp_path: Path, llm: FakeLLM, **analyzer: object) -> tuple[list[str], FakeLLM]:
    settings = {"confirm_model": "cheap-model", **analyzer}
    app, channel, _ = await open_app(make_config(tmp_path, analyzer=settings), llm=llm)
    try:
        for text in [*ON_TOPIC, SHIFT]:
            await app.router.submit(inbound(text))
    finally:
        await app.__aexit__(None, None, None)
    return channel.texts(), llm


def answering_chat_then(*confirm_answers: str | Exception) -> FakeLLM:
    llm = FakeLLM()
    for _ in ON_TOPIC:
        llm.enqueue_text("ok")
    for answer in confirm_answers:
        if isinstance(answer, Exception):
            llm.enqueue_error(answer)
        else:
            llm.enqueue_text(answer)
    return llm


async def test_confirmation_confirms_a_shift(tmp_path: Path) -> None:
    texts, llm = await confirmed(tmp_path, answering_chat_then("topic_shift", "ok"))
    assert CLEAR_TIP in texts[-1]
    request = llm.requests[3]
    assert (request.model, request.purpose) == ("cheap-model", "analyzer")
    prompt = request.messages[0].parts[0]
    assert isinstance(prompt, TextPart)
    assert SHIFT in prompt.text
    assert ON_TOPIC[0] in prompt.text


async def test_confirmation_rejects_a_shift(tmp_path: Path) -> None:
    texts, _ = await confirmed(tmp_path, answering_chat_then("continuation", "ok"))
    assert texts[-1] == "ok"


async def test_confirmation_may_reclassify_as_frustration(tmp_path: Path) -> None:
    texts, _ = await confirmed(tmp_path, answering_chat_then("Frustration.", "ok"))
    assert COMPACT_TIP in texts[-1]


async def test_confirmation_error_falls_back_to_the_heuristic(tmp_path: Path) -> None:
    texts, _ = await confirmed(tmp_path, answering_chat_then(ModelRejected("bad request"), "ok"))
    assert CLEAR_TIP in texts[-1]


async def test_unreadable_confirmation_falls_back_to_the_heuristic(tmp_path: Path) -> None:
    texts, _ = await confirmed(tmp_path, answering_chat_then("no idea, sorry", "ok"))
    assert CLEAR_TIP in texts[-1]


class HangingConfirmLLM(FakeLLM):
    """Answers chat turns, never answers the analyzer's confirmation."""

    async def complete(self, request: LLMRequest) -> LLMResponse:
        if request.purpose == "analyzer":
            await asyncio.Event().wait()
        return await super().complete(request)


async def test_confirmation_timeout_falls_back_to_the_heuristic(tmp_path: Path) -> None:
    texts, _ = await confirmed(tmp_path, HangingConfirmLLM(), confirm_timeout_s=0.05)
    assert CLEAR_TIP in texts[-1]


async def test_no_confirmation_call_without_a_confirm_model(harness: Harness) -> None:
    await harness.say_all([*ON_TOPIC, SHIFT])
    llm = harness.app.llm
    assert isinstance(llm, FakeLLM)
    assert [r.purpose for r in llm.requests] == ["chat"] * 4


def test_state_json_has_every_field() -> None:
    from dataclasses import asdict

    state = WatchState(recent=[["tea", "kettle"]], messages=3, last_command="clear")
    assert state.to_json() == asdict(state)
    assert WatchState.from_json(state.to_json()) == state
