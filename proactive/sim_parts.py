"""The simulator's stand-ins for the world around the engine: the model and the channel.

`ScriptedGate` is the `LLM` port answering the gate: an item's answer is drawn from the seed,
the item's label and its local time (so it does not depend on the order items run in); now and
then it first remembers something with the real memory tool, or answers with a malformed
marker. `SimChannel` records every send with its virtual time and fails or times out now and
then. `Keyed` makes those draws: a function of a key, the same in every process; `Names` gives
them keys that are the same in a shard of the population as in the whole. `no_lock`
stands for the chat locks: nothing else runs in the simulated chats.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Self, TypeVar

from gateway.core.clock import ManualClock
from gateway.core.errors import DeliveryPermanent, DeliveryUncertain
from gateway.core.llm import LLMRequest, LLMResponse, TextPart, ToolCall
from gateway.core.messages import ChatRef, Outbound, SentReceipt
from proactive.gate import DECISION_TOOL
from vault.proactive.store import Item

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

    def __init__(self, seed: int, rename: Callable[[str], str] = str) -> None:
        self.seed = seed
        # The prompt's first line with the item's id replaced by its name (`Names`).
        self.rename = rename
        self.calls = 0
        self.tool_calls = 0

    async def __call__(self, request: LLMRequest, chat_key: str | None) -> LLMResponse:
        self.calls += 1
        first = request.messages[0].parts[0]
        prompt = first.text if isinstance(first, TextPart) else ""
        lines = prompt.splitlines()
        local = next((line for line in lines if line.startswith("Timezone:")), "")
        head = self.rename(lines[0]) if lines else ""
        rng = Keyed(self.seed, "gate", head, local)
        label = head.rpartition("(")[2].rstrip(")") if lines else "?"
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
    # An idempotency key as the draws take it (the item's name: `Names`).
    rename: Callable[[str], str] = str
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
        roll = Keyed(self.seed, "send", self.rename(out.idempotency_key)).random()
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


_LABEL = re.compile(r"\((follow-up|check-in) #(\d+)\)$")


class Names:
    """Names for the items that do not depend on other users' rows: a follow-up is its user's
    n-th, a check-in its user's with its type and detection time. Ids differ between a run of
    the whole population and one of a shard of it; every keyed draw takes the name instead."""

    def __init__(self) -> None:
        self._by_key: dict[str, str] = {}
        self._count: Counter[str] = Counter()

    def intent(self, user: str, intent_id: int) -> None:
        """Name a follow-up as it is registered (a user's follow-ups in their order)."""
        self._count[user] += 1
        name = f"proactive:intent:{user}#{self._count[user]}"
        self._by_key[f"proactive:intent:{intent_id}"] = name

    def of(self, item: Item) -> str:
        key = f"proactive:{item.source}:{item.id}"
        if item.source == "trigger" and key not in self._by_key:
            name = f"proactive:trigger:{item.user_id}/{item.kind}@{item.created_at}"
            self._by_key[key] = name
        return self._by_key[key]

    def key(self, idempotency_key: str) -> str:
        """A send's idempotency key as its item's name (every sent item was claimed first)."""
        return self._by_key[idempotency_key]

    def label(self, line: str) -> str:
        """The gate prompt's first line with "(follow-up #12)" as the item's name."""
        found = _LABEL.search(line)
        if found is None:
            return line
        source = "intent" if found[1] == "follow-up" else "trigger"
        name = self._by_key[f"proactive:{source}:{found[2]}"]
        return f"{line[: found.start()]}({name.removeprefix('proactive:')})"

    def number(self, item: Item) -> int:
        """The item's name as a 64-bit integer (the executor's keyed draws)."""
        return int.from_bytes(hashlib.blake2b(self.of(item).encode(), digest_size=8).digest())

    @staticmethod
    def user(item: Item) -> int:
        """A user's key for the executor's draws: their place in the population, plus one
        (their id in a run of the whole population)."""
        return int(item.user_id.removeprefix("user")) + 1

    async def probe(self, step: str, item: Item) -> None:
        """The executor's probe: names every item as it is claimed."""
        self.of(item)


@dataclass(frozen=True, slots=True)
class Shard:
    """The users a run simulates (their places in the population; None: everyone)."""

    index: int = 0
    users: tuple[int, ...] | None = None


WHOLE = Shard()  # the whole population
