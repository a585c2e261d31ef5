"""Staleness: for one document and one session, give it, keep what was given, or refresh it.

Pure; the inputs come from the injection audit (`vault/injections.py`, the source of truth: the
hash recorded at the document's last injection in this session) and the index (its current
hash). Staleness is content-based — a document is stale when its content hash differs from the
one it was given with, never because time passed — and a stale document is refreshed only when
its policy allows it and the session's refresh cooldown has passed:

- `on_change`: refreshed (`changed`) as soon as the cooldown allows;
- `on_request`: refreshed (`requested`) only after `/context refresh`;
- `session_start`: never during the session; the next session gets the new version.

Until then the session keeps the exact text it was given (its snapshot), and `/context` says
that it changed.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from gateway.knowledge.rules import Policy


class Action(StrEnum):
    INJECT = "inject"  # first time in this session
    REFRESH = "refresh"  # the new version replaces the one given
    KEEP = "keep"  # the version given is current
    KEEP_STALE = "keep_stale"  # the version given is outdated, and stays for now


class Freshness(StrEnum):
    FRESH = "fresh"
    CHANGED = "changed since last injection"
    NEVER = "never injected"


@dataclass(frozen=True, slots=True)
class Decision:
    action: Action
    reason: str  # the audit's reason for INJECT/REFRESH; a note for people otherwise


HELD = {
    Policy.ON_CHANGE: "changed; refreshed once the cooldown has passed",
    Policy.ON_REQUEST: "changed; asking for a refresh (context refresh) brings it",
    Policy.SESSION_START: "changed; the new version comes with the next session",
}


def decide(
    *,
    given_hash: str | None,
    current_hash: str,
    policy: Policy,
    wanted: str | None,
    refresh_allowed: bool,
    requested: bool,
) -> Decision | None:
    """`wanted`: "relevant" or "linked" when retrieval picked the document this turn."""
    if given_hash is None:
        if wanted is None:
            return None
        if wanted == "relevant" and policy is Policy.SESSION_START:
            return Decision(Action.INJECT, "session_start")
        return Decision(Action.INJECT, wanted)
    if given_hash == current_hash:
        return Decision(Action.KEEP, "given earlier in this session")
    if refresh_allowed and policy is Policy.ON_CHANGE:
        return Decision(Action.REFRESH, "changed")
    if refresh_allowed and requested and policy is Policy.ON_REQUEST:
        return Decision(Action.REFRESH, "requested")
    return Decision(Action.KEEP_STALE, HELD[policy])


def freshness(given_hash: str | None, current_hash: str) -> Freshness:
    if given_hash is None:
        return Freshness.NEVER
    return Freshness.FRESH if given_hash == current_hash else Freshness.CHANGED
