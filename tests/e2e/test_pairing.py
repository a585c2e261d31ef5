"""Pairing through the router on two channels: a stranger's notice carries a code, an admin on
the other platform answers it, and the decision holds at once, after a restart, and in the
audit log — while `config.toml` keeps the last word."""

from __future__ import annotations

import re
from pathlib import Path

from gateway.app.app import App
from gateway.app.config import Config
from gateway.core.clock import ManualClock
from tests.conftest import make_config
from tests.fakes import FakeLLM, MemoryChannel, inbound

ADMIN = "UBOSS"
CODE = re.compile(r"pairing code is ([A-Z2-9]{6})")


def two_channel_app(config: Config, llm: FakeLLM) -> tuple[App, MemoryChannel, MemoryChannel]:
    telegram, slack = MemoryChannel(name="telegram"), MemoryChannel(name="slack")
    app = App(
        config=config,
        channels=[telegram, slack],
        llm_override=llm,
        use_llm_override=True,
        clock=ManualClock(),
    )
    return app, telegram, slack


def config_for(tmp_path: Path, **auth: object) -> Config:
    return make_config(tmp_path, auth={"admins": [f"slack:{ADMIN}"], "allow": [], **auth})


async def test_a_code_from_one_channel_is_allowed_from_the_other(
    tmp_path: Path, llm: FakeLLM
) -> None:
    app, telegram, slack = two_channel_app(config_for(tmp_path), llm)
    async with app:
        await app.router.submit(inbound("hi", channel="telegram", user="42", chat="42"))
        await app.router.submit(inbound("anyone?", channel="telegram", user="42", chat="42"))
        [notice] = telegram.texts()  # one notice a day, not one per message
        found = CODE.search(notice)
        assert found is not None, notice
        assert "`/admin allow " in notice and "telegram:42" in notice
        assert llm.requests == []

        code = found.group(1)
        admin = {"channel": "slack", "user": ADMIN, "chat": "D1"}
        await app.router.submit(inbound(f"/admin allow {code.lower()}", **admin))
        assert slack.texts()[-1] == "Allowed telegram:42: they can talk to Iris now."

        await app.router.submit(inbound("hello again", channel="telegram", user="42", chat="42"))
        assert telegram.texts()[-1] == "ok"  # the model answered, no restart

        await app.router.submit(inbound(f"/admin allow {code}", **admin))
        assert "No open pairing code" in slack.texts()[-1]  # a code is spent once used

        await app.router.submit(inbound("/admin users", **admin))
        assert "telegram:42 — last seen" in slack.texts()[-1]
        assert "access: granted in chat" in slack.texts()[-1]
        audit = [(e.actor, e.action, e.outcome) for e in await app.audit.recent()]
        assert ("slack:UBOSS", "admin allow", "ok") in audit
        assert ("slack:UBOSS", "admin allow", "error") in audit

    llm2 = FakeLLM(default="still here")
    app, telegram, slack = two_channel_app(config_for(tmp_path), llm2)
    async with app:  # persisted in the vault: a restart keeps the decision
        await app.router.submit(inbound("after restart", channel="telegram", user="42", chat="42"))
        assert telegram.texts() == ["still here"]
        await app.router.submit(
            inbound("/admin deny telegram:42", channel="slack", user=ADMIN, chat="D1")
        )
        assert slack.texts()[-1].startswith("Denied telegram:42")
        await app.router.submit(inbound("hello?", channel="telegram", user="42", chat="42"))
        assert telegram.texts() == ["still here"]  # silence: no reply, no notice
        await app.router.submit(
            inbound("/admin allow telegram:42", channel="slack", user=ADMIN, chat="D1")
        )
        await app.router.submit(inbound("back", channel="telegram", user="42", chat="42"))
        assert telegram.texts()[-1] == "still here"


async def test_a_slack_stranger_is_let_in_by_id_and_codes_show_in_users(
    tmp_path: Path, llm: FakeLLM
) -> None:
    config = make_config(tmp_path, auth={"admins": ["telegram:1"], "allow": []})
    app, telegram, slack = two_channel_app(config, llm)
    async with app:
        await app.router.submit(inbound("hey", channel="slack", user="U9", chat="D9"))
        code = CODE.search(slack.texts()[0])
        assert code is not None
        await app.router.submit(inbound("/admin users", channel="telegram", user="1", chat="1"))
        listing = telegram.texts()[-1]
        assert f"{code.group(1)} — slack:U9" in listing
        assert "slack:U9 — last seen" not in listing  # a stranger's messages are not kept
        await app.router.submit(
            inbound("/admin allow slack:U9", channel="telegram", user="1", chat="1")
        )
        await app.router.submit(inbound("/admin users", channel="telegram", user="1", chat="1"))
        assert code.group(1) not in telegram.texts()[-1]  # the open code went with the decision
        await app.router.submit(inbound("now?", channel="slack", user="U9", chat="D9"))
        assert slack.texts()[-1] == "ok"


async def test_the_config_file_wins_over_chat(tmp_path: Path, llm: FakeLLM) -> None:
    app, telegram, slack = two_channel_app(config_for(tmp_path, allow=["telegram:*"]), llm)
    async with app:
        admin = {"channel": "slack", "user": ADMIN, "chat": "D1"}
        await app.router.submit(inbound("/admin deny telegram:42", **admin))
        refusal = slack.texts()[-1]
        assert "config.toml ([auth] allow has telegram:*)" in refusal
        await app.router.submit(inbound("still in?", channel="telegram", user="42", chat="42"))
        assert telegram.texts() == ["ok"]
        await app.router.submit(inbound("/admin allow telegram:7", **admin))
        assert "already let in by config.toml" in slack.texts()[-1]
        assert await app.access.grants() == []


async def test_bad_admin_arguments_get_one_clear_line(tmp_path: Path, llm: FakeLLM) -> None:
    app, _, slack = two_channel_app(config_for(tmp_path), llm)
    async with app:
        for args, expected in [
            ("", "Say who"),
            ("hello world", "neither a pairing code"),
            ("telegram:*", "Wildcards are for config.toml"),
            ("telegram:", "is not an id"),
            ("telegram:abc", "a Telegram user id is a positive number"),
            ("slack:u123", "a Slack user id is upper case"),
            ("ZZZZZZ", "No open pairing code ZZZZZZ"),
        ]:
            await app.router.submit(
                inbound(f"/admin allow {args}", channel="slack", user=ADMIN, chat="D1")
            )
            assert expected in slack.texts()[-1], (args, slack.texts()[-1])


async def test_without_pairing_the_notice_names_the_config_key(
    tmp_path: Path, llm: FakeLLM
) -> None:
    app, telegram, _ = two_channel_app(config_for(tmp_path, pairing=False), llm)
    async with app:
        await app.router.submit(inbound("hi", channel="telegram", user="42", chat="42"))
        assert telegram.texts() == [
            "Sorry — you're not authorized to use this assistant. Ask the admin to add "
            "`telegram:42` to [auth] allow."
        ]
        assert await app.access.pending(0) == []
