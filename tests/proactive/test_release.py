"""What matured during quiet hours goes out after them in priority order — the user's reminder
first, then the follow-ups by confidence — one user's messages spaced by `min_spacing`, on the
real engine and vault."""

from __future__ import annotations

from pathlib import Path

from gateway.core.llm import LLMRequest, LLMResponse, TextPart, ToolCall
from proactive.policy import PolicyConfig
from tests.proactive.support import MIN, harness, utc_ms

WHATS = ("item-reminder", "item-high", "item-low")


def echo(request: LLMRequest) -> LLMResponse:
    """The gate sends a message naming the item it was asked about (in capitals: the prompt
    also quotes the messages already sent)."""
    prompt = request.messages[0].parts[0]
    assert isinstance(prompt, TextPart)
    what = next(w for w in WHATS if w in prompt.text)
    decision = {"action": "send", "message": what.upper()}
    call = ToolCall(f"toolu_{what}", "proactive_decision", decision)
    return LLMResponse(parts=(call,), stop_reason="tool_use", model="fake")


async def test_overnight_items_go_out_in_priority_order_and_spaced(tmp_path: Path) -> None:
    policy = PolicyConfig(jitter_max_ms=0, min_spacing_ms=90 * MIN, release_window_ms=120 * MIN)
    async with harness(tmp_path, start="2026-01-10T22:30:00", policy=policy) as h:  # 23:30 CET
        user, chat = await h.user("u1", "Europe/Berlin")
        low = await h.intent(user, chat, what="item-low", confidence=0.6)
        high = await h.intent(user, chat, what="item-high", confidence=0.95)
        reminder = await h.intent(user, chat, what="item-reminder", kind="user_reminder")
        for _ in range(10):
            h.llm.enqueue_fn(echo)
        engine = h.engine()
        await engine.tick()
        assert h.channel.sent == []
        released = {(await h.row(i))["execute_at"] for i in (low, high, reminder)}
        assert len(released) == 1  # one instant for the user's night, in 08:00–10:00 CET
        (at,) = released
        assert utc_ms("2026-01-11T07:00:00") <= at < utc_ms("2026-01-11T09:00:00")

        sent: list[tuple[int, str]] = []
        while (due := await h.store.next_due_ms()) is not None:
            h.clock.set(due)
            await engine.tick()
            sent += [(due, out.text) for out in h.channel.sent[len(sent) :]]
            assert len(sent) <= 3
        assert [text for _, text in sent] == [w.upper() for w in WHATS]
        times = [when for when, _ in sent]
        assert times[0] == at  # the reminder at the release instant, exempt from the spacing
        assert times[1] - times[0] >= 90 * MIN  # the spacing counts the reminder
        assert times[2] - times[1] >= 90 * MIN
        assert times[2] < utc_ms("2026-01-11T21:00:00")  # paced within the day, before quiet
