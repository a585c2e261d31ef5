"""`/context` and its subcommands, in any chat (the `events` ones for admins only).

- `/context`: what the last model request here contained (`report.py`, from its trace);
- `/context trace`: the pipeline's phases for that request;
- `/context docs`: the documents visible in this chat, each fresh, changed since it was given
  here, or never given;
- `/context refresh`: rescan the files now (at most once per refresh cooldown per session);
  the next message gets the new versions of what changed, `on_request` documents included
  (a `session_start` document, an ADR, keeps its version until the next session: said so);
- `/context why TITLE`: the injection history of one document in this chat;
- `/context events list|enable NAME|disable NAME|priority NAME N` (admins).

Every listing is filtered by the chat's scope: a document outside it is never named here.
"""

from __future__ import annotations

from datetime import UTC, datetime

from gateway.agent.context import ProviderInfo
from gateway.agent.traces import TraceStore
from gateway.core.errors import NotAllowed, UserInputError
from gateway.core.scope import Scope
from gateway.knowledge.events import ProviderEvents, describe
from gateway.knowledge.indexer import Indexer
from gateway.knowledge.provider import KnowledgeProvider, short
from gateway.knowledge.report import render
from gateway.knowledge.rules import PathRules, Policy, policy_of
from gateway.knowledge.staleness import Freshness, freshness
from gateway.turns.commands import Command, CommandCall
from vault.injections import InjectionLog
from vault.knowledge import DocumentRow, KnowledgeStore

USAGE = "[docs | refresh | why TITLE | trace | events …]"
MAX_LISTED = 50
NAMED_SKIPS = 5  # skipped files named by `/context refresh`
# Within the refresh cooldown, `/context refresh` rescans the files at most this often (any
# user may send it at message rate).
RESCAN_GAP_MS = 5_000


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M UTC")


def find_title(docs: list[DocumentRow], title: str, context: str = "/context") -> DocumentRow:
    """The one document `title` names; `context` is how this chat types the command."""
    wanted = title.strip().lower()
    if not wanted:
        raise UserInputError(f"Usage: {context} why TITLE — a document title from {context} docs.")
    for test in (
        lambda d: d.title.lower() == wanted,
        lambda d: d.title.lower().startswith(wanted),
        lambda d: wanted in d.title.lower() or wanted in d.path.lower(),
    ):
        found = [d for d in docs if test(d)]
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            names = "; ".join(d.title for d in found[:5])
            raise UserInputError(f"'{title[:60]}' matches several documents: {names}.")
    raise UserInputError(f"No document titled '{title[:60]}' here. See {context} docs.")


class ContextCommands:
    def __init__(
        self,
        *,
        traces: TraceStore,
        provider: KnowledgeProvider,
        indexer: Indexer,
        store: KnowledgeStore,
        injections: InjectionLog,
        rules: PathRules,
        events: ProviderEvents,
    ) -> None:
        self.traces = traces
        self.provider = provider
        self.indexer = indexer
        self.store = store
        self.injections = injections
        self.rules = rules
        self.events = events

    def command(self) -> Command:
        return Command(
            "context", "what I was given for this chat, and team documents", self.run, usage=USAGE
        )

    async def run(self, call: CommandCall) -> str:
        sub, _, rest = call.args.strip().partition(" ")
        sub = sub.lower()
        if not sub:
            scope = call.scope
            return render(await self.traces.latest(scope.chat.key), scope)
        if rest.strip() and sub in ("trace", "docs", "refresh"):  # these take nothing more
            raise UserInputError(f"Usage: {call.hint('context')} {sub} (nothing after it)")
        if sub == "trace":
            trace = await self.traces.latest(call.scope.chat.key)
            return trace.render() if trace else "No model request in this chat yet."
        if sub == "docs":
            return await self.docs(call)
        if sub == "refresh":
            return await self.refresh(call)
        if sub == "why":
            return await self.why(call, rest)
        if sub == "events":
            return await self.run_events(call, rest)
        raise UserInputError(f"Usage: {call.hint('context')} {USAGE}")

    async def docs(self, call: CommandCall) -> str:
        await self.indexer.ready()
        docs = await self.store.visible(self.rules.visible(call.scope))
        if not docs:
            return "No team documents are visible in this chat."
        given = await self.injections.working_set(call.scope.session_pk)
        lines = [f"Documents visible here ({len(docs)}):"]
        for doc in docs[:MAX_LISTED]:
            was = given.get(doc.id)
            state = freshness(was.injection.content_hash if was else None, doc.content_hash)
            status = f"/{doc.status}" if doc.status else ""
            lines.append(
                f"• {doc.title} ({doc.path}, {doc.type}{status}) · {short(doc.content_hash)}"
                f" · {state.value}"
            )
        if len(docs) > MAX_LISTED:
            lines.append(f"… and {len(docs) - MAX_LISTED} more.")
        return "\n".join(lines)

    async def refresh(self, call: CommandCall) -> str:
        scope = call.scope
        cooldown = self.provider.cooldown_ms
        last = await self.injections.last_request_ms(scope.session_pk)
        cooling = (last is not None and scope.now_ms - last < cooldown) or not (
            await self.provider.refresh_allowed(scope)
        )
        # The files are rescanned either way (`/context docs` then shows what changed), at most
        # once per `RESCAN_GAP_MS` while cooling down; only what this conversation is given
        # waits for the cooldown.
        last_scan = self.indexer.last_scan_ms
        if cooling and last_scan is not None and scope.now_ms - last_scan < RESCAN_GAP_MS:
            return (
                "Documents were refreshed in this conversation less than "
                f"{cooldown // 1000} seconds ago, and the files were just rescanned: try "
                "again in a moment."
            )
        report = await self.indexer.scan(embed=False)  # new vectors come with the rescan
        if cooling:
            updated = self._mine(report.indexed_paths, scope)
            return (
                f"Rescanned: {len(updated)} updated. Documents were refreshed in this "
                f"conversation less than {cooldown // 1000} seconds ago: for their new "
                "versions, try again in a moment."
            )
        await self.injections.request_refresh(scope.session_pk, scope.now_ms)
        given = await self.injections.working_set(scope.session_pk)
        live = await self.store.documents(given, self.rules.visible(scope))
        changed = [
            d
            for d in live
            if freshness(given[d.id].injection.content_hash, d.content_hash) is Freshness.CHANGED
        ]
        pinned: list[str] = []  # kept as given until the next session
        renewed: list[str] = []
        for d in changed:
            held = policy_of(d.type, d.status) is Policy.SESSION_START
            (pinned if held else renewed).append(d.title)
        updated = self._mine(report.indexed_paths, scope)
        removed = self._mine(report.retired_paths, scope)
        skipped = self._mine(report.skipped, scope)
        head = (
            f"Rescanned: {len(updated)} updated, {len(removed)} removed, "
            f"{len(skipped)} skipped{self._named(skipped)}."
        )
        if not changed:
            return f"{head} Nothing I was given here has changed."
        said = [head]
        if renewed:
            said.append(f"Your next message gets the new version of: {'; '.join(renewed)}.")
        if pinned:
            said.append(
                f"Changed, kept as given until the next session ({call.hint('clear')} starts "
                "one): "
                f"{'; '.join(pinned)}."
            )
        return " ".join(said)

    def _mine(self, paths: list[str], scope: Scope) -> list[str]:
        """The paths this chat may see: never one under a scope the chat is outside of (not
        even as a count)."""
        visible = self.rules.visible(scope)
        return [p for p in paths if (s := self.rules.scope_for(p)) is None or s in visible]

    @staticmethod
    def _named(mine: list[str]) -> str:
        """The skipped files, named (the log says why)."""
        if not mine:
            return ""
        more = f" and {len(mine) - NAMED_SKIPS} more" if len(mine) > NAMED_SKIPS else ""
        return f" ({', '.join(mine[:NAMED_SKIPS])}{more})"

    async def why(self, call: CommandCall, title: str) -> str:
        await self.indexer.ready()
        docs = await self.store.visible(self.rules.visible(call.scope))
        doc = find_title(docs, title, call.hint("context"))
        history = await self.injections.history(call.scope.chat_pk, doc.id)
        if not history:
            return f"“{doc.title}” ({short(doc.content_hash)}) was never given to me in this chat."
        lines = [f"“{doc.title}” — now {short(doc.content_hash)}; given in this chat:"]
        lines.extend(
            f"• {_when(i.at_ms)}: {i.reason} · {short(i.content_hash)} · {i.tokens} tokens"
            for i in history
        )
        return "\n".join(lines)

    async def run_events(self, call: CommandCall, args: str) -> str:
        scope = call.scope
        if not scope.is_admin:
            await self.events.refused(scope.user.key, scope.chat.channel, args)
            raise NotAllowed(f"{call.hint('context')} events is for admins only.")
        words = args.split()
        verb = words.pop(0).lower() if words else "list"
        if verb == "list" and not words:
            return self._listing(await self.events.listing())
        actor, via = scope.user.key, scope.chat.channel
        if verb in ("enable", "disable") and len(words) == 1:
            info = await self.events.change(
                words[0], enabled=verb == "enable", actor=actor, via=via
            )
            return f"Done: {describe(info)}. Applies from the next message."
        if verb == "priority" and len(words) == 2:
            try:
                priority = int(words[1])
            except ValueError:
                raise UserInputError("A priority is a whole number from -1000 to 1000.") from None
            info = await self.events.change(words[0], priority=priority, actor=actor, via=via)
            return f"Done: {describe(info)}. Applies from the next message."
        raise UserInputError(
            f"Usage: {call.hint('context')} events list | enable NAME | disable NAME | "
            "priority NAME N"
        )

    @staticmethod
    def _listing(providers: list[ProviderInfo]) -> str:
        lines = ["Context providers, in the order they run:"]
        phase = ""
        for info in providers:
            if info.phase != phase:
                phase = info.phase
                lines.append(f"{phase}:")
            lines.append(f"  • {describe(info)}")
        return "\n".join(lines)
