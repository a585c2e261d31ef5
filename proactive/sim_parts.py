"""The simulator's stand-ins for the world around the engine: the model and the channel.

`ScriptedGate` is the `LLM` port answering the gate: an item's answer is drawn from the seed,
the item's label and its local time (so it does not depend on the order items run in); now and
then it first remembers something with the real memory tool, or answers with a malformed
marker. `SimChannel` records every send with its virtual time and fails or times out now and
then. `Keyed` makes those draws: a function of a key, the same in every process. `no_lock`
stands for the chat locks: nothing else runs in the simulated chats.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Self, TypeVar

from gateway.core.clock import ManualClock
from gateway.core.errors import DeliveryPermanent, DeliveryUncertain
from gateway.core.llm import LLMRequest, LLMResponse, TextPart, ToolCall
from gateway.core.messages import ChatRef, Outbound, SentReceipt
from proactive.gate import DECISION_TOOL

T = TypeVar("T")


class Keyed:
    """Draws that are a function of a key (BLAKE2b of the seed and `parts`, a counter per
    draw): the same for the same key whatever order things happen in, in every process."""

    def __init__(self, seed: int, *parts: object) -> None:
        self._key = ":".join(str(p) for p in (seed, *parts)).encode()
        self._drawn = 0

    def _bits(self) -> int:
        self._drawn += 1
        block = self._key + self._drawn.to_bytes(4, "big")
        return int.from_bytes(hashlib.blake2b(block, digest_size=8).digest(), "big")

    def random(self) -> float:
        return (self._bits() >> 11) / (1 << 53)

    def randrange(self, start: int, stop: int) -> int:
        return start + self._bits() % (stop - start)

    def choice(self, options: Sequence[T]) -> T:
        return options[self._bits() % len(options)]


class ScriptedGate:
    """The `LLM` port for the simulator: an item's answer is drawn from the seed, the item's
    label and its local time; sometimes it first remembers something with the memory tool."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.calls = 0
        self.tool_calls = 0

    async def __call__(self, request: LLMRequest, chat_key: str | None) -> LLMResponse:
        self.calls += 1
        first = request.messages[0].parts[0]
        prompt = first.text if isinstance(first, TextPart) else ""
        lines = prompt.splitlines()
        local = next((line for line in lines if line.startswith("Timezone:")), "")
        rng = Keyed(self.seed, "gate", lines[0] if lines else "", local)
        label = lines[0].rpartition("(")[2].rstrip(")") if lines else "?"
        can_remember = any(t.name == "memory_remember" for t in request.tools)
        roll = rng.random()
        if len(request.messages) == 1 and can_remember and roll < 0.05:
            self.tool_calls += 1
            note = {"text": f"was asked about {label} (the plan they mentioned)"}
            return _answer(ToolCall(f"m{self.calls}", "memory_remember", note))
        roll = rng.random() if len(request.messages) > 1 else roll
        if request.tool_choice != DECISION_TOOL and roll < 0.04:
            return LLMResponse(parts=(TextPart("[SKIP] not worth it"),), stop_reason="end_turn",
                               model="sim")  # fmt: skip
        if roll < 0.16:
            args: dict[str, Any] = {"action": "skip", "reason": "not useful now"}
        elif roll < 0.26:
            args = {"action": "defer", "hours": rng.choice([1, 3, 6, 12])}
        else:
            args = {"action": "send", "message": f"Checking in about {label}"}
        return _answer(ToolCall(f"s{self.calls}", DECISION_TOOL, args))


def _answer(call: ToolCall) -> LLMResponse:
    return LLMResponse(parts=(call,), stop_reason="tool_use", model="sim")


@dataclass
class SimChannel:
    """Records every send with its virtual time; fails or times out now and then (a draw keyed
    by the message's idempotency key)."""

    clock: ManualClock
    seed: int
    name: str = "sim"
    sends: list[tuple[int, Outbound]] = field(default_factory=list)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    def command_hint(self, command: str) -> str:
        return f"/{command}"

    async def typing(self, chat: ChatRef) -> None:
        return None

    async def run(self, on_inbound: Any) -> None:  # never started by the simulator
        return None

    async def send(self, out: Outbound) -> SentReceipt:
        roll = Keyed(self.seed, "send", out.idempotency_key).random()
        if roll < 0.01:
            raise DeliveryPermanent("simulated: chat gone")
        self.sends.append((self.clock.now_ms(), out))
        if roll < 0.02:
            raise DeliveryUncertain("simulated: timeout after the request left")
        return SentReceipt(platform_message_ids=(str(len(self.sends)),))


class _NoLock:
    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc: object) -> None:
        return None


def no_lock(key: str) -> _NoLock:
    """The simulator has no concurrent turns: no chat lock is needed."""
    return _NoLock()
