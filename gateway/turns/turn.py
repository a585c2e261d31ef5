"""A turn: one inbound message on its way through the pipeline, and the chain of steps.

The pipeline is a list of steps built once into an onion: each step is `async (turn, next)`
and may stop the turn by not calling `next` (dedupe, auth, commands do). The composition root
picks the steps (`gateway/app/app.py`), features add theirs through the seam
(`gateway/features/`), and the router runs the chain. This module is the data they share, so
none of them needs the scheduler to get a type.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from gateway.core.messages import Inbound
from gateway.core.scope import Scope
from vault.conversations import Recorded


@dataclass(slots=True)
class Turn:
    inbound: Inbound
    now_ms: int
    authorized: bool = False
    is_admin: bool = False
    command: tuple[str, str] | None = None
    recorded: Recorded | None = None
    scope: Scope | None = None
    suggestion: str | None = None
    # Work started by a step that may still add to the reply (the analyzer's tip): it runs
    # while the model answers, and the reply waits for what is left of it before it is sent.
    before_reply: list[asyncio.Task[None]] = field(default_factory=list)
    replies: int = 0
    # Saved before a restart and handed over again (`gateway/turns/intake.py`); `resumed`
    # once the record step found it recorded but not answered.
    replay: bool = False
    resumed: bool = False


Next = Callable[[Turn], Awaitable[None]]
Step = Callable[[Turn, Next], Awaitable[None]]
# Side effects of a user writing, run after recording (engagement, the analyzer's observation).
TurnHook = Callable[[Turn], Awaitable[None]]


async def _end(turn: Turn) -> None:
    return None


def build_chain(steps: Sequence[Step]) -> Next:
    chain: Next = _end
    for step in reversed(steps):
        chain = _link(step, chain)
    return chain


def _link(step: Step, nxt: Next) -> Next:
    # A plain function returning the step's coroutine, not a coroutine of its own: every
    # resumption of a turn walks its whole await chain, so each wrapper frame costs each time.
    return lambda turn: step(turn, nxt)
