"""The block under a reply, through the router: its rules (threshold, max per turn, not what the
request already carried, item and chat cooldowns, off per user and per chat), the lifecycle in
the vault, Use (into the next request, said so) and Dismiss (never again here), bad input, the
tools and the per-type figures."""

from __future__ import annotations

from pathlib import Path

from gateway.core.llm import LLMRequest
from gateway.core.messages import ChatKind, OutboundKind
from tests.gateway.knowledge.support import request_text, write
from tests.gateway.suggestions.support import DEPLOY, World, world_for

DEPLOY_Q = "the canary deploy failed, how do I roll back the release?"
MINUTE = 60  # ManualClock.advance takes seconds


async def statuses(w: World) -> list[tuple[str, str]]:
    rows = await w.app.vault.fetchall("SELECT title, status FROM suggestions ORDER BY id")
    return [(r[0], r[1]) for r in rows]


async def test_a_block_follows_the_reply_and_is_recorded_as_shown(tmp_path: Path) -> None:
    async with world_for(tmp_path, max_per_turn=2) as w:
        w.llm.enqueue_text("Here is how.")
        sent = await w.say(DEPLOY_Q)
        assert sent[0] == "Here is how."  # the reply first, untouched
        assert len(sent) == 2
        block = sent[1]
        assert "Runbook: rolling back a deploy" in block and "Why: you are discussing" in block
        assert "/use 1" in block and "/dismiss 1" in block
        assert w.channel.sent[-1].kind is OutboundKind.NOTICE
        # Use / Dismiss buttons per item, each naming the suggestion by its id.
        (row_id,) = [r[0] for r in await w.app.vault.fetchall("SELECT id FROM suggestions")]
        assert [[b.payload for b in row] for row in w.channel.sent[-1].buttons] == [
            [f"/use #{row_id}", f"/dismiss #{row_id}"]
        ]
        assert [[b.label for b in row] for row in w.channel.sent[-1].buttons] == [
            ["Use 1", "Dismiss 1"]
        ]
        assert w.channel.sent[0].buttons == ()  # the reply itself has none
        assert await statuses(w) == [("Runbook: rolling back a deploy", "shown")]
        # The block is not part of the model's history.
        w.llm.enqueue_text("ok")
        await w.say("thanks", chat="c1")
        assert "Possibly useful here" not in request_text(w.llm.requests[-1])


async def test_nothing_is_shown_for_an_unrelated_message(tmp_path: Path) -> None:
    async with world_for(tmp_path) as w:
        assert len(await w.say("what rhymes with orange?")) == 1
        assert await statuses(w) == []


async def test_a_document_already_in_the_request_is_not_suggested(tmp_path: Path) -> None:
    async with world_for(tmp_path, knowledge_tokens=4000) as w:
        sent = await w.say(DEPLOY_Q)
        assert "roll back to the previous release" in request_text(w.llm.requests[-1])
        assert len(sent) == 1


async def test_a_memory_already_in_the_request_is_not_suggested(tmp_path: Path) -> None:
    async with world_for(tmp_path) as w:
        scope = await w.scope()
        await w.remember(scope, "My staging database is stg-orders-7")
        sent = await w.say("what's my staging database name again")
        # The memories provider put the memory into the request: no block repeats it.
        assert "stg-orders-7" in request_text(w.llm.requests[-1])
        assert len(sent) == 1


async def test_chat_cooldown_item_cooldown_and_dismissal(tmp_path: Path) -> None:
    flags = "which feature flag service do we use?"
    async with world_for(tmp_path, chat_cooldown_minutes=10, item_cooldown_hours=24) as w:
        assert "Runbook: rolling back a deploy" in (await w.say(DEPLOY_Q))[1]
        w.clock.advance(5 * MINUTE)
        assert len(await w.say(flags)) == 1  # one block per chat per 10 minutes
        w.clock.advance(6 * MINUTE)
        sent = await w.say(flags)
        assert len(sent) == 2 and "ADR 0005" in sent[1]
        assert "Runbook" not in sent[1]  # the same item within 24 h: not again
        assert (await w.say("/dismiss 1"))[0].startswith("Dismissed “ADR 0005")
        w.clock.advance(11 * MINUTE)
        assert len(await w.say(DEPLOY_Q)) == 1  # the runbook still cooling down
        w.clock.advance(48 * 60 * MINUTE)
        assert "ADR 0005" not in "".join((await w.say(flags))[1:])  # dismissed here: never
        sent = await w.say(flags, chat="c2", user="u2")  # another chat still gets it
        assert len(sent) == 2 and "ADR 0005" in sent[1]


async def test_use_puts_the_item_into_the_next_request_once(tmp_path: Path) -> None:
    async with world_for(tmp_path) as w:
        await w.say(DEPLOY_Q)
        answer = await w.say("/use 1")
        assert answer == [
            "Added the part of “Runbook: rolling back a deploy” that fits this conversation to the "
            "context of your next message."
        ]
        await w.say("ok, walk me through it")
        first: LLMRequest = w.llm.requests[-1]
        assert "The user chose to use this suggested item" in request_text(first)
        assert "roll back to the previous release" in request_text(first)
        w.clock.advance(MINUTE)
        await w.say("and then?")
        assert "The user chose to use this suggested item" not in request_text(w.llm.requests[-1])
        assert await statuses(w) == [("Runbook: rolling back a deploy", "used")]
        assert (await w.say("/dismiss 1"))[0] == "that suggestion was already used"


async def test_off_per_user_and_per_chat_by_admins(tmp_path: Path) -> None:
    async with world_for(tmp_path, chat_cooldown_minutes=0) as w:
        assert (await w.say("/suggestions off"))[0] == "Suggestions are off for you."
        assert len(await w.say(DEPLOY_Q)) == 1
        group = await w.say(DEPLOY_Q, chat="g1", kind=ChatKind.GROUP, mentioned=True)
        assert len(group) == 1  # off for this user everywhere
        await w.say("/suggestions on")
        assert len(await w.say(DEPLOY_Q)) == 2
        refused = await w.say(
            "/suggestions off chat", chat="g1", user="u2", kind=ChatKind.GROUP, mentioned=True
        )
        assert refused == ["only admins switch suggestions for a whole chat"]
        done = await w.say(
            "/suggestions off chat", chat="g1", user="boss", kind=ChatKind.GROUP, mentioned=True
        )
        assert done == ["Suggestions are off for everyone in this chat."]
        rows = await w.app.vault.fetchall("SELECT actor, action, outcome FROM audit_log")
        assert [tuple(r) for r in rows] == [
            ("memory:u2", "suggestions off chat", "refused"),
            ("memory:boss", "suggestions off chat", "ok"),
        ]  # a switch for everyone in a chat is an admin action: audited, refusals too


async def test_bad_input_is_answered_clearly(tmp_path: Path) -> None:
    async with world_for(tmp_path) as w:
        assert (await w.say("/use 1"))[0] == "there is no suggestion to act on in this chat"
        await w.say(DEPLOY_Q)
        assert (await w.say("/use two"))[0] == "usage: /use N (the number of the suggestion)"
        assert (await w.say("/use 0"))[0] == "usage: /use N (the number of the suggestion)"
        assert (await w.say("/dismiss 7"))[0] == "the last suggestions are numbered 1 to 1"
        assert (await w.say("/suggestions maybe"))[0] == "usage: /suggestions off|on [chat]"
        # Another chat cannot act on this chat's block, by number or by id.
        other = await w.say("/use 1", chat="c9", user="u9")
        assert other == ["there is no suggestion to act on in this chat"]
        (row_id,) = [r[0] for r in await w.app.vault.fetchall("SELECT id FROM suggestions")]
        assert await w.say(f"/use #{row_id}", chat="c9", user="u9") == [
            "no such suggestion in this chat"
        ]
        assert (await w.say("/use #99999999999999999999"))[0].startswith("usage: /use N")
        assert await statuses(w) == [("Runbook: rolling back a deploy", "shown")]


async def test_tools_and_per_type_figures(tmp_path: Path) -> None:
    async with world_for(tmp_path) as w:
        w.llm.enqueue_tool("context_suggest", {"about": "which feature flag service do we use"})
        w.llm.enqueue_text("done")
        await w.say("what should I know?")
        tool_result = request_text(w.llm.requests[-1])
        assert (
            "[decision] ADR 0005" in str(w.llm.requests[-1].messages[-1])
            or "ADR 0005" in tool_result
        )
        await w.say(DEPLOY_Q, chat="c2")
        w.llm.enqueue_tool("suggestion_feedback", {"number": 1, "action": "dismissed"})
        w.llm.enqueue_text("noted")
        await w.say("I don't need that", chat="c2")
        assert ("Runbook: rolling back a deploy", "dismissed") in await statuses(w)
        figures = await w.feature.stats(0)
        assert figures["doc"]["shown"] == 1 and figures["doc"]["dismissed"] == 1
        assert figures["doc"]["acceptance"] == 0.0 and figures["doc"]["demoted"] is False
        stats = await w.say("/admin stats", user="boss", chat="boss")
        assert "suggestions: doc shown 1, used 0, dismissed 1, acceptance 0%" in stats[0]


async def test_a_button_under_an_older_block_acts_on_its_own_item(tmp_path: Path) -> None:
    async with world_for(tmp_path, chat_cooldown_minutes=0, item_cooldown_hours=0) as w:
        await w.say(DEPLOY_Q)
        older = w.channel.sent[-1].buttons[0][1].payload  # "Dismiss 1" of the first block
        w.clock.advance(MINUTE)
        await w.say(DEPLOY_Q)
        assert len(await w.app.vault.fetchall("SELECT id FROM suggestions")) == 2
        assert (await w.say(older))[0].startswith("Dismissed")
        assert [s for _, s in await statuses(w)] == ["dismissed", "shown"]


def test_a_changed_or_superseded_document_the_request_carried_is_still_offered() -> None:
    """The reply may rest on the old or superseded text: that is what the user must hear,
    whereas a document the request carried as it is adds nothing — a changed one included,
    when the request carried its new version."""
    from gateway.suggestions.finder import Candidate, ItemType
    from gateway.suggestions.inline import already_given

    def doc(kind: ItemType) -> Candidate:
        return Candidate(key="doc:5", type=kind, title="ADR 0005", summary="", relevance=0.9,
                         reason="", version="new")  # fmt: skip

    carried = {"ADR 0005"}
    assert already_given(doc(ItemType.DECISION), carried, set())
    assert already_given(doc(ItemType.DOC), carried, set())
    assert not already_given(doc(ItemType.CHANGE), carried, {"old"})
    assert already_given(doc(ItemType.CHANGE), carried, {"new"})
    assert not already_given(doc(ItemType.WARNING), carried, {"new"})


async def test_a_changed_document_the_reply_was_given_anew_is_not_offered_as_changed(
    tmp_path: Path,
) -> None:
    async with world_for(tmp_path, knowledge_tokens=4000, chat_cooldown_minutes=0,
                         item_cooldown_hours=0) as w:  # fmt: skip
        assert len(await w.say(DEPLOY_Q)) == 1  # carried: nothing to add
        write(w.root, "deploy.md", DEPLOY.replace("previous release", "last green release"))
        await w.rescan()
        w.clock.advance(MINUTE)
        sent = await w.say(DEPLOY_Q)
        assert "last green release" in request_text(w.llm.requests[-1])  # given anew
        assert len(sent) == 1, sent  # no "Changed: … since this chat last used it"


def test_a_used_changed_document_says_it_is_the_current_text_and_stays_data() -> None:
    """ "Use" on a "Changed:" suggestion while the session keeps its earlier copy (policy or
    cooldown) put two versions in one request with nothing saying which was current; and the
    document text could close a <document> element like any other."""
    from gateway.suggestions.feedback import _used
    from vault.suggestions import SuggestionRow

    row = SuggestionRow(
        id=1, chat=1, user=1, block=1, ordinal=1, item_key="doc:7", type="change",
        title="Deploys", summary="", content="Deploys (docs/deploy.md)\nRoll back.\n</document>",
        relevance=0.9, reason="", status="used", created_ms=0, shown_ms=0, decided_ms=0,
        applied_ms=None,
    )  # fmt: skip
    text = _used(row)
    assert "changed since the copy given earlier in this request" in text
    assert "where the two differ, this one is current" in text
    assert text.endswith("Roll back.\n&lt;/document>")
