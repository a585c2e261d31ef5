"""Access decisions made by another process on the same vault apply here: the README has an
admin approve a pairing code from `iris chat` while `iris run` serves Telegram (and replicas
share one PostgreSQL vault). Before, a running process kept the grants it read at start."""

from __future__ import annotations

from pathlib import Path

from gateway.core.clock import ManualClock
from gateway.core.messages import UserRef
from gateway.turns.auth import Authorizer
from gateway.turns.steps import GRANTS_RELOAD_MS
from tests.conftest import app_with, make_config
from tests.fakes import FakeLLM, MemoryChannel, inbound
from vault.pairing import Access, Grant


async def test_allow_and_deny_from_another_process_apply_within_the_reload_period(
    tmp_path: Path,
) -> None:
    config = make_config(tmp_path, auth={"allow": ["console:*"], "admins": ["memory:boss"]})
    clock = ManualClock()
    served = MemoryChannel()
    console = MemoryChannel(name="console")
    async with (
        app_with(config, served, FakeLLM("hello stranger"), clock) as running,
        app_with(config, console, FakeLLM(), clock) as terminal,
    ):
        await running.router.submit(inbound("hi?", user="newcomer", chat="newcomer"))
        assert served.texts()[-1].startswith("Sorry — you're not authorized")
        before = len(served.texts())
        await terminal.router.submit(
            inbound("/admin allow memory:newcomer", channel="console", user="me", chat="me")
        )
        assert "can talk to Iris now" in console.texts()[-1]
        clock.advance(GRANTS_RELOAD_MS / 1000)
        await running.router.submit(inbound("and now?", user="newcomer", chat="newcomer"))
        assert served.texts()[before:] == ["hello stranger"]

        await terminal.router.submit(
            inbound("/admin deny memory:newcomer", channel="console", user="me", chat="me")
        )
        clock.advance(GRANTS_RELOAD_MS / 1000)
        await running.router.submit(inbound("still there?", user="newcomer", chat="newcomer"))
        assert served.texts()[before:] == ["hello stranger"]  # ignored from now on


def test_a_reload_keeps_a_decision_made_here_after_its_read_began() -> None:
    """The read may predate an `/admin allow` this process made meanwhile: replaying the old
    snapshot alone would undo it for up to the reload period."""
    authorizer = Authorizer(admins=(), allow=())
    newcomer = UserRef(channel="memory", user_id="newcomer")
    mark = authorizer.mark()  # the reload starts reading
    authorizer.grant(newcomer.key)  # an admin lets them in, here, meanwhile
    authorizer.use([], since=mark)  # the read's snapshot has no grant yet
    assert authorizer.is_allowed(newcomer)
    mark = authorizer.mark()
    authorizer.revoke(newcomer.key)
    authorizer.use(
        [Grant(channel="memory", user_id="newcomer", access=Access.ALLOW, actor="boss", at_ms=0)],
        since=mark,
    )
    assert not authorizer.is_allowed(newcomer) and authorizer.is_denied(newcomer)
    authorizer.use(
        [Grant(channel="memory", user_id="newcomer", access=Access.ALLOW, actor="boss", at_ms=1)]
    )  # a later read wins
    assert authorizer.is_allowed(newcomer)
