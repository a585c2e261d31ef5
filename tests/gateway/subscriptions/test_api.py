"""Subscriptions over the real admin API on 127.0.0.1: creation and its bad input, webhook
delivery to a loopback receiver that verifies the signature, retries and disabling, polling and
feedback, server-sent events with resume and a client that goes away."""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.core.messages import ChatKind, UserRef
from tests.fakes import inbound
from tests.fakes.clock import run_clock_until
from tests.gateway.subscriptions.helpers import AUTH as AUTH_HEADERS
from tests.gateway.subscriptions.helpers import Served, read_sse, receiver, served

MEMORY = "The deploy runbook for the billing service lives in the ops wiki"
ASK = "how do I deploy the billing service again"


def poll_body(**extra: Any) -> dict[str, Any]:
    return {"patterns": [{"type": "topic", "pattern": "deploy billing"}], "callback": "poll",
            "min_relevance": 0.1, "cooldown_seconds": 0, **extra}  # fmt: skip


async def user_with_memory(s: Served, user: str = "u1", text: str = MEMORY) -> int:
    await s.app.router.submit(inbound("hello", user=user, chat=user))
    row = await s.app.conversations.get_user(UserRef(channel="memory", user_id=user))
    assert row is not None
    await s.app.memories.remember(row.pk, text, s.clock.now_ms())
    s.clock.advance(60)  # a memory saved in the same turn is never suggested back
    return row.pk


async def test_create_list_delete_and_the_secret_is_shown_once(tmp_path: Path) -> None:
    async with served(tmp_path) as s:
        status, made = await s.call(
            "POST", "/context/subscriptions",
            {**poll_body(), "callback": "webhook", "url": "https://hooks.example.com/x"},
        )  # fmt: skip
        assert status == 201 and made["id"].startswith("sub_") and len(made["secret"]) > 20
        audit = await s.app.audit.recent()
        assert audit and all(made["secret"] not in e.result for e in audit)
        status, polled = await s.call("POST", "/context/subscriptions", poll_body())
        assert status == 201 and "secret" not in polled
        status, listing = await s.call("GET", "/context/subscriptions")
        assert status == 200
        assert [x["id"] for x in listing["subscriptions"]] == [made["id"], polled["id"]]
        assert made["secret"] not in str(listing)
        assert listing["subscriptions"][0]["last_triggered_at"] is None
        status, gone = await s.call("DELETE", f"/context/subscriptions/{made['id']}")
        assert (status, gone) == (200, {"id": made["id"], "deleted": True})
        status, _ = await s.call("DELETE", f"/context/subscriptions/{made['id']}")
        assert status == 404
        status, doc = await s.call("GET", "/openapi.json")
        for path in ("/context/subscriptions", "/context/subscriptions/{id}",
                     "/context/suggestions", "/context/suggestions/{id}/feedback",
                     "/context/stream"):  # fmt: skip
            assert path in doc["paths"]
        assert "201" in doc["paths"]["/context/subscriptions"]["post"]["responses"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({**poll_body(), "callback": "webhook", "url": "ftp://example.com/x"}, "webhook.url"),
        ({**poll_body(), "callback": "webhook", "url": "file:///etc/passwd"}, "webhook.url"),
        ({**poll_body(), "callback": "webhook"}, "webhook.url"),
        ({**poll_body(), "url": "https://example.com/"}, "poll.url"),
        (
            {**poll_body(), "patterns": [{"type": "entity", "pattern": "INC-(["}]},
            "poll.patterns.0.entity.pattern",
        ),
        ({**poll_body(), "patterns": []}, "poll.patterns"),
        ({**poll_body(), "patterns": [{"type": "symbol", "pattern": "x"}]}, "poll.patterns.0"),
        ({**poll_body(), "min_relevance": 1.5}, "poll.min_relevance"),
        ({**poll_body(), "chats": ["not a key"]}, "poll.chats.0"),
        ({**poll_body(), "callback": "carrier-pigeon"}, "body"),
    ],
)
async def test_bad_subscriptions_are_422_naming_the_field(
    tmp_path: Path, body: dict[str, Any], field: str
) -> None:
    async with served(tmp_path) as s:
        status, answer = await s.call("POST", "/context/subscriptions", body)
        assert status == 422, answer
        fields = [d["field"] for d in answer["detail"]]
        assert any(f == field or f.startswith(field) for f in fields) or field == "body", fields
        _, listing = await s.call("GET", "/context/subscriptions")
        assert listing["subscriptions"] == []  # nothing half-made


async def test_other_bad_requests(tmp_path: Path) -> None:
    async with served(tmp_path) as s:
        assert (await s.call("POST", "/context/subscriptions", b"{nope"))[0] == 400
        assert (await s.call("POST", "/context/subscriptions", b"[" * 70_000))[0] == 413
        assert (await s.call("DELETE", "/context/subscriptions/sub_0000000000000000"))[0] == 404
        status, answer = await s.call("DELETE", "/context/subscriptions/1")
        assert status == 422 and answer["detail"][0]["field"] == "id"
        status, answer = await s.call("GET", "/context/suggestions")
        assert status == 422 and answer["detail"][0]["field"] == "subscription"
        status, _ = await s.call("GET", "/context/suggestions?subscription=sub_0000000000000000")
        assert status == 404
        async with s.http.get(s.base + "/context/subscriptions") as res:
            assert res.status == 401  # no token


async def test_a_message_reaches_a_webhook_signed_with_an_idempotency_key(tmp_path: Path) -> None:
    async with served(tmp_path) as s, receiver() as hook:
        _, made = await s.call(
            "POST", "/context/subscriptions",
            {**poll_body(), "callback": "webhook", "url": hook.url},
        )  # fmt: skip
        hook.secret = made["secret"]
        await user_with_memory(s)
        async with asyncio.TaskGroup() as tg:
            job = tg.create_task(s.feature.webhooks.run())
            await s.app.router.submit(inbound(ASK, user="u1", chat="u1"))
            await asyncio.wait_for(hook.arrived.wait(), 30)  # fail, never hang
            job.cancel()
        [got] = hook.got
        assert got["verified"]
        event = got["body"]
        assert event["subscription"] == made["id"] and got["key"] == event["idempotency_key"]
        suggestion = event["suggestion"]
        assert suggestion["trigger"] == {
            "type": "message", "source": suggestion["trigger"]["source"], "chat": "memory:u1"
        }  # fmt: skip
        [item] = suggestion["items"]
        assert item["type"] == "memory" and "ops wiki" in item["summary"]
        assert 0 < item["relevance"] <= 1 and "deploy" in item["reason"]
        _, listing = await s.call("GET", "/context/subscriptions")
        assert listing["subscriptions"][0]["last_triggered_at"] is not None


async def test_an_unreachable_webhook_is_retried_then_disabled_and_audited(
    tmp_path: Path,
) -> None:
    with socket.socket() as sock:  # a port nobody listens on once it is closed
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/hook"
    settings: dict[str, object] = {"webhook_max_attempts": 3, "webhook_max_failures": 3}
    async with served(tmp_path, subscriptions=settings) as s:
        _, broken = await s.call(
            "POST", "/context/subscriptions", {**poll_body(), "callback": "webhook", "url": url}
        )
        _, fine = await s.call("POST", "/context/subscriptions", poll_body())
        await user_with_memory(s)
        webhooks = s.feature.webhooks
        gave_up: list[str] = []
        webhooks.on_disabled = gave_up.append
        async with asyncio.TaskGroup() as tg:
            job = tg.create_task(webhooks.run())
            await s.app.router.submit(inbound(ASK, user="u1", chat="u1"))
            await run_clock_until(s.clock, lambda: bool(gave_up))
            job.cancel()
        assert gave_up == [broken["id"]]
        _, listing = await s.call("GET", "/context/subscriptions")
        state = {x["id"]: x for x in listing["subscriptions"]}
        assert state[broken["id"]]["enabled"] is False
        assert state[broken["id"]]["failures"] == 3
        assert "3 times in a row" in state[broken["id"]]["disabled_reason"]
        assert state[fine["id"]]["enabled"] is True
        entries = await s.app.audit.recent()
        assert any(e.action == "subscription disabled" and e.outcome == "error" for e in entries)
        # Nothing else was affected: the poll subscription got its event.
        _, page = await s.call("GET", f"/context/suggestions?subscription={fine['id']}")
        assert len(page["events"]) == 1
        # An admin turns it on again once the receiver is fixed: the failure count restarts.
        status, again = await s.call("POST", f"/context/subscriptions/{broken['id']}/enable")
        assert status == 200
        assert (again["enabled"], again["failures"], again["disabled_reason"]) == (True, 0, None)
        status, off = await s.call("POST", f"/context/subscriptions/{fine['id']}/disable")
        assert (status, off["enabled"], off["disabled_reason"]) == (200, False, "disabled by api")
        unknown = "/context/subscriptions/sub_0000000000000000/enable"
        assert (await s.call("POST", unknown))[0] == 404
        actions = [e.action for e in await s.app.audit.recent()]
        assert "subscription enabled" in actions and actions.count("subscription disabled") == 2


async def test_poll_with_a_cursor_and_feedback(tmp_path: Path) -> None:
    async with served(tmp_path) as s:
        _, mine = await s.call("POST", "/context/subscriptions", poll_body())
        _, other = await s.call("POST", "/context/subscriptions", poll_body())
        await user_with_memory(s)
        await s.app.router.submit(inbound(ASK, user="u1", chat="u1"))
        status, page = await s.call("GET", f"/context/suggestions?subscription={mine['id']}")
        assert status == 200 and len(page["events"]) == 1
        event = page["events"][0]["suggestion"]
        _, empty = await s.call(
            "GET", f"/context/suggestions?subscription={mine['id']}&since={page['cursor']}"
        )
        assert empty == {"events": [], "cursor": page["cursor"]}
        path = f"/context/suggestions/{event['id']}/feedback"
        wrong_sub = {"action": "used", "item": 0, "subscription": other["id"]}
        assert (await s.call("POST", path, wrong_sub))[0] == 404
        wrong_chat = {"action": "used", "subscription": mine["id"], "chat": "memory:u2"}
        assert (await s.call("POST", path, wrong_chat))[0] == 404
        unknown = "/context/suggestions/sug_0000000000000000/feedback"
        assert (await s.call("POST", unknown, {**wrong_sub, "subscription": mine["id"]}))[0] == 404
        assert (await s.call("POST", path, {"action": "used", "subscription": mine["id"],
                                            "item": 7}))[0] == 404  # fmt: skip
        ok = {"action": "used", "item": 0, "subscription": mine["id"], "chat": "memory:u1"}
        status, answer = await s.call("POST", path, ok)
        assert (status, answer["status"]) == (200, "used")
        assert (await s.call("POST", path, {**ok, "action": "dismissed"}))[0] == 409
        # Two answers at once: the loser's 409 names what the winner marked.
        await s.app.router.submit(inbound(ASK + " again", user="u1", chat="u1"))
        _, later = await s.call(
            "GET", f"/context/suggestions?subscription={mine['id']}&since={page['cursor']}"
        )
        race = f"/context/suggestions/{later['events'][-1]['suggestion']['id']}/feedback"
        answers = await asyncio.gather(
            s.call("POST", race, ok), s.call("POST", race, {**ok, "action": "dismissed"})
        )
        actions = ("used", "dismissed")
        [won] = [a for (code, _), a in zip(answers, actions, strict=True) if code == 200]
        [(status, lost)] = [a for a in answers if a[0] != 200]
        assert status == 409 and lost["error"] == f"That suggestion was already marked {won}."


async def test_events_stream_resume_with_last_event_id_and_survive_a_disconnect(
    tmp_path: Path,
) -> None:
    async with served(tmp_path, subscriptions={"stream_keepalive_s": 0.05}) as s:
        _, made = await s.call("POST", "/context/subscriptions", {**poll_body(), "callback": "sse"})
        await user_with_memory(s)
        url = f"{s.base}/context/stream?subscription={made['id']}"
        async with s.http.get(url, headers=AUTH_HEADERS) as res:
            assert res.status == 200
            assert res.headers["Content-Type"].startswith("text/event-stream")
            await s.app.router.submit(inbound(ASK, user="u1", chat="u1"))
            [(first_id, first)] = await read_sse(res, 1)
            assert first["subscription"] == made["id"]
        # The client went away mid-stream; two more events are stored meanwhile.
        await s.app.router.submit(inbound(ASK + " now", user="u1", chat="u1"))
        await s.app.router.submit(inbound(ASK + " today", user="u1", chat="u1"))
        headers = {**AUTH_HEADERS, "Last-Event-ID": first_id}
        async with s.http.get(url, headers=headers) as res:
            got = await read_sse(res, 2)
        assert [int(i) for i, _ in got] == sorted(int(i) for i, _ in got)
        assert all(int(i) > int(first_id) for i, _ in got)
        # The server noticed both disconnects at its next write (a keep-alive at the latest):
        # nobody is left waiting on the subscription.
        await asyncio.wait_for(s.feature.streams.quiet(made["id"]), 10)
        bad = {**AUTH_HEADERS, "Last-Event-ID": "yesterday"}
        async with s.http.get(url, headers=bad) as res:
            assert res.status == 400
        missing = f"{s.base}/context/stream?subscription=sub_0000000000000000"
        async with s.http.get(missing, headers=AUTH_HEADERS) as res:
            assert res.status == 404


async def test_deleting_a_subscription_ends_its_open_streams(tmp_path: Path) -> None:
    async with served(tmp_path, subscriptions={"stream_keepalive_s": 300}) as s:
        _, made = await s.call("POST", "/context/subscriptions", {**poll_body(), "callback": "sse"})
        url = f"{s.base}/context/stream?subscription={made['id']}"
        async with s.http.get(url, headers=AUTH_HEADERS) as res:
            assert res.status == 200
            status, _ = await s.call("DELETE", f"/context/subscriptions/{made['id']}")
            assert status == 200
            rest = await asyncio.wait_for(res.content.read(), 10)  # the end, not keep-alives
        assert b"data:" not in rest
        await asyncio.wait_for(s.feature.streams.quiet(made["id"]), 10)


async def test_group_chats_never_get_a_members_memory(tmp_path: Path) -> None:
    async with served(tmp_path) as s:
        _, made = await s.call("POST", "/context/subscriptions", poll_body())
        await user_with_memory(s)
        group = inbound(ASK, user="u1", chat="g1", kind=ChatKind.GROUP, mentioned=True)
        await s.app.router.submit(group)
        _, page = await s.call("GET", f"/context/suggestions?subscription={made['id']}")
        assert page["events"] == []


async def test_admin_subscribe_in_chat(tmp_path: Path) -> None:
    admin: dict[str, object] = {"admins": ["memory:boss"], "allow": ["memory:*"]}
    async with served(tmp_path, auth=admin) as s:
        await s.app.router.submit(inbound("/admin subscribe add entity INC-[0-9]+", user="boss"))
        reply = s.channel.sent[-1].text
        assert "created (poll)" in reply
        await s.app.router.submit(inbound("/admin subscribe add entity INC-([", user="boss"))
        assert "patterns.0.entity.pattern" in s.channel.sent[-1].text
        await s.app.router.submit(inbound("/admin subscribe", user="boss"))
        assert "entity INC-[0-9]+" in s.channel.sent[-1].text
        for url in ("ftp://example.com/x", "http://127.0.0.1:999999/hook"):
            await s.app.router.submit(
                inbound(f"/admin subscribe webhook {url} topic deploy", user="boss")
            )
            said = s.channel.sent[-1].text
            assert said.startswith("Not a valid subscription: url: must be an http:// or")
            assert "^https?" not in said  # no regular expression for a person to decode
        group = inbound("/admin subscribe webhook https://x.example/h topic deploy",
                        user="boss", chat="g1", kind=ChatKind.GROUP, mentioned=True)  # fmt: skip
        await s.app.router.submit(group)
        assert "private chat" in s.channel.sent[-1].text
        _, listing = await s.call("GET", "/context/subscriptions")
        [sub] = listing["subscriptions"]
        assert sub["chats"] == ["memory:c1"]
        await s.app.router.submit(inbound(f"/admin subscribe delete {sub['id']}", user="u2"))
        _, listing = await s.call("GET", "/context/subscriptions")
        assert len(listing["subscriptions"]) == 1  # not an admin: refused
        await s.app.router.submit(inbound(f"/admin subscribe disable {sub['id']}", user="boss"))
        assert s.channel.sent[-1].text == f"Subscription {sub['id']} disabled."
        await s.app.router.submit(inbound("/admin subscribe", user="boss"))
        assert "off (disabled by memory:boss)" in s.channel.sent[-1].text
        await s.app.router.submit(inbound(f"/admin subscribe enable {sub['id']}", user="boss"))
        _, listing = await s.call("GET", "/context/subscriptions")
        assert listing["subscriptions"][0]["enabled"] is True


async def test_an_open_stream_ends_when_iris_stops(tmp_path: Path) -> None:
    async with aiohttp.ClientSession() as http:
        running = served(tmp_path)
        s = await running.__aenter__()
        _, made = await s.call("POST", "/context/subscriptions", {**poll_body(), "callback": "sse"})
        url = f"{s.base}/context/stream?subscription={made['id']}"
        async with http.get(url, headers=AUTH_HEADERS) as res:
            assert res.status == 200
            # Stopping does not wait out the server's shutdown timeout for the open stream.
            await asyncio.wait_for(running.__aexit__(None, None, None), 10)
            assert await res.content.read() == b""  # the stream ended cleanly


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("http://127.0.0.1:8080/probe", "127.0.0.1 is a private, local or reserved address"),
        ("http://169.254.169.254/latest/meta-data", "169.254.169.254 is a private"),
        ("http://10.0.0.1/x", "10.0.0.1 is a private"),
        ("http://localhost:9/x", "localhost is this host"),
        ("http://a.example:99999/x", "its port is not a number from 1 to 65535"),
        ("http://127.0.0.1:0/x", "its port is not a number from 1 to 65535"),
        ("https://-/x", "its host is not a host name or an address"),
    ],
)
async def test_a_webhook_to_a_private_address_or_nowhere_is_refused(
    tmp_path: Path, url: str, said: str
) -> None:
    """Iris POSTed wherever a webhook pointed, 127.0.0.1 and a cloud's metadata service
    included (and recorded the status that answered there); URLs that can never work were
    accepted, then failed until the subscription was disabled."""
    async with served(tmp_path, subscriptions={"webhook_private_addresses": False}) as s:
        body = {**poll_body(), "callback": "webhook", "url": url}
        status, answer = await s.call("POST", "/context/subscriptions", body)
        assert status in (400, 422), answer
        assert said in json.dumps(answer)
        _, listing = await s.call("GET", "/context/subscriptions")
        assert listing["subscriptions"] == []


async def test_a_webhook_name_that_resolves_privately_is_never_connected_to() -> None:
    """A host name is resolved by `PublicResolver`: only public addresses reach aiohttp, so
    a name for 127.0.0.1 (or one that resolves differently the second time) connects nowhere."""
    from gateway.subscriptions.addresses import PublicResolver, url_problem

    assert url_problem("http://localhost.:9/x", private_ok=False) is not None
    assert url_problem("http://127.0.0.1:9/x", private_ok=True) is None  # the operator's choice
    assert url_problem("https://hooks.example.com/iris", private_ok=False) is None
    resolver = PublicResolver()
    try:
        with pytest.raises(OSError, match="resolves to no public address"):
            await resolver.resolve("localhost", 80)
    finally:
        await resolver.close()
