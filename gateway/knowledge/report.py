"""What `/context` and the `context_status` tool say: the last model request of a chat, from the
trace the pipeline recorded while building it (never recomputed, so it cannot disagree).

Each source with its tokens; history as a count; documents one per line with their title,
short content hash, tokens and why; totals against the budget; and what was dropped, and why.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime

from gateway.agent.context import ContextTrace, TraceItem
from gateway.core.scope import Scope

NAMES = {
    "persona": "persona",
    "profile": "the sender's profile and local time",  # in a group: whoever wrote last
    "summary": "summary of the earlier conversation",
    "proactive": "follow-ups and proactive quota",
    "message": "the message",
}


ORDER = (
    "persona",
    "profile",
    "summary",
    "proactive",
    "memories",
    "documents",
    "history",
    "message",
)


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M UTC")


def document_line(item: TraceItem) -> str:
    why = f" — {item.reason}" if item.reason else ""
    return f"  – {item.label} · {item.content_hash[:8]} · {item.tokens} tokens{why}"


def render(trace: ContextTrace | None, scope: Scope | None = None) -> str:
    """With `scope`, a trace from before the chat's current conversation is shown as what it
    is: the request before the last /clear or /compact, whose history the next one lacks."""
    if trace is None:
        return "No model request in this chat yet: there is no context to show."
    since_ms = scope.session_started_ms if scope else 0
    if scope is None:
        earlier = False
    elif trace.session_pk:
        earlier = trace.session_pk != scope.session_pk
    else:  # saved by a version that did not record the conversation
        earlier = trace.at_ms < since_ms
    if not earlier:
        return _render(trace, "Context of the last model request here")
    return (
        f"No model request since this conversation was cleared or compacted ({_when(since_ms)}):"
        " the next one starts from there, without the history below.\n"
        + _render(trace, "The last one before that")
    )


def _render(trace: ContextTrace, head: str) -> str:
    by_source: dict[str, list[TraceItem]] = defaultdict(list)
    for item in trace.items:
        by_source[item.source].append(item)
    lines = [f"{head} ({_when(trace.at_ms)}): {trace.total_tokens} of {trace.budget} tokens."]
    order = {name: n for n, name in enumerate(ORDER)}
    for source, items in sorted(by_source.items(), key=lambda kv: order.get(kv[0], 5)):
        tokens = sum(i.tokens for i in items)
        if source == "history":
            lines.append(f"• history: {len(items)} messages, {tokens} tokens")
        elif source == "documents":
            lines.append(f"• documents: {len(items)}, {tokens} tokens")
            lines.extend(document_line(i) for i in items)
        elif source == "memories":
            reasons = "; ".join(i.reason for i in items if i.reason)
            why = f" ({reasons})" if reasons else ""
            lines.append(f"• memories: {len(items)}, {tokens} tokens{why}")
        else:
            lines.append(f"• {NAMES.get(source, source)}: {tokens} tokens")
    if "documents" not in by_source:
        lines.append("• documents: none")
    if trace.dropped:
        lines.append("Left out:")
        for item, why in trace.dropped:
            what = f"{item.source} “{item.label}”" if item.label else f"a {item.source} item"
            lines.append(f"  – {what} ({item.tokens} tokens): {why}")
    return "\n".join(lines)


def documents_of(trace: ContextTrace | None) -> list[tuple[str, str]]:
    """(title, content hash) of every document the request carried."""
    if trace is None:
        return []
    return [(i.label, i.content_hash) for i in trace.items if i.source == "documents"]
