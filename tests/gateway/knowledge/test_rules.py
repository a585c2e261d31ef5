"""Globs, scopes, refresh policies and staleness decisions."""

from __future__ import annotations

import pytest

from gateway.core.messages import ChatRef, UserRef
from gateway.core.scope import Scope
from gateway.knowledge.rules import PathRules, Policy, compile_glob, policy_of
from gateway.knowledge.staleness import Action, Decision, decide


def scope(chat: str = "c1", user: str = "u1", group: bool = False) -> Scope:
    return Scope(
        user=UserRef(channel="slack", user_id=user), chat=ChatRef(channel="slack", chat_id=chat),
        user_pk=1, chat_pk=1, session_pk=1, message_pk=1, text="", now_ms=0, in_group=group,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("glob", "path", "matches"),
    [
        ("notes/**/*.md", "notes/a.md", True),
        ("notes/**/*.md", "notes/x/y/a.md", True),
        ("notes/*.md", "notes/x/a.md", False),
        ("adr/*.md", "adr/0001.md", True),
        ("adr/*.md", "adr/0001.txt", False),
        ("team-a/**", "team-a/deep/file.md", True),
    ],
)
def test_globs(glob: str, path: str, matches: bool) -> None:
    assert bool(compile_glob(glob).match(path)) is matches


def test_scopes_restrict_to_chats_and_to_users_in_dms_only() -> None:
    rules = PathRules(
        {"decisions/*.md": "decision"},
        {"team-a/**": ("chat:slack:CTEAM",), "hr/**": ("user:slack:u1",)},
    )
    assert rules.type_for("decisions/x.md") == "decision" and rules.type_for("x.md") is None
    assert rules.scope_for("team-a/plan.md") == "team-a/**"
    assert rules.scope_for("public.md") is None
    assert rules.visible(scope(chat="CTEAM", user="u2")) == {"team-a/**"}
    assert rules.visible(scope(chat="dm-u1", user="u1")) == {"hr/**"}
    assert rules.visible(scope(chat="G1", user="u1", group=True)) == frozenset()
    assert rules.visible(scope(chat="other", user="u2")) == frozenset()


@pytest.mark.parametrize(
    ("doc_type", "status", "policy"),
    [
        ("adr", "accepted", Policy.SESSION_START),
        ("rfc", "draft", Policy.ON_CHANGE),
        ("rfc", "in-progress", Policy.ON_CHANGE),
        ("rfc", "implemented", Policy.ON_REQUEST),
        ("runbook", "", Policy.ON_CHANGE),
        ("decision", "accepted", Policy.ON_CHANGE),
        ("note", "", Policy.ON_CHANGE),
        ("runbook", "superseded", Policy.ON_REQUEST),
        ("adr", "superseded", Policy.ON_REQUEST),
    ],
)
def test_refresh_policy_defaults(doc_type: str, status: str, policy: Policy) -> None:
    assert policy_of(doc_type, status) is policy


def _decide(given: str | None, policy: Policy, **kw: object) -> Decision | None:
    args: dict[str, object] = {"wanted": None, "refresh_allowed": True, "requested": False}
    args.update(kw)
    return decide(given_hash=given, current_hash="new", policy=policy, **args)  # type: ignore[arg-type]


def test_staleness_decisions() -> None:
    assert _decide(None, Policy.ON_CHANGE) is None
    assert _decide(None, Policy.ON_CHANGE, wanted="relevant") == Decision(Action.INJECT, "relevant")
    assert _decide(None, Policy.SESSION_START, wanted="relevant") == Decision(
        Action.INJECT, "session_start"
    )
    assert _decide(None, Policy.ON_CHANGE, wanted="linked") == Decision(Action.INJECT, "linked")
    assert _decide("new", Policy.ON_CHANGE).action is Action.KEEP  # type: ignore[union-attr]
    assert _decide("old", Policy.ON_CHANGE) == Decision(Action.REFRESH, "changed")
    cooling = _decide("old", Policy.ON_CHANGE, refresh_allowed=False)
    assert cooling is not None and cooling.action is Action.KEEP_STALE
    held = _decide("old", Policy.ON_REQUEST)
    assert held is not None and held.action is Action.KEEP_STALE
    assert _decide("old", Policy.ON_REQUEST, requested=True) == Decision(
        Action.REFRESH, "requested"
    )
    adr = _decide("old", Policy.SESSION_START, requested=True)
    assert adr is not None and adr.action is Action.KEEP_STALE
