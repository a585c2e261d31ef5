"""The SQL that differs on PostgreSQL, translated in this one place.

The stores write SQLite's SQL. Most of it is portable already (`ON CONFLICT … DO …`,
`RETURNING`, partial indexes, `||`); what differs mechanically is translated here, statement by
statement, once per distinct text (cached):

- placeholders: `?` -> `%s`, `:name` -> `%(name)s`; a literal `%` is doubled (psycopg reads
  `%` as the start of a placeholder anywhere in a statement that has parameters);
- SQLite's null-safe `a IS b` / `a IS NOT b` -> `IS [NOT] DISTINCT FROM`;
- `user` and `window` are reserved words in PostgreSQL: quoted wherever they are identifiers;
- `INSERT OR IGNORE INTO t …` -> `INSERT INTO t … ON CONFLICT DO NOTHING`;
- in `ON CONFLICT … DO UPDATE SET`, a bare column means the target row on SQLite but is
  ambiguous with `excluded` on PostgreSQL: the right-hand sides (and the WHERE) name the table;
- the scalar two-argument `max(a, b)` / `min(a, b)` -> `GREATEST` / `LEAST`;
- JSON: `x IN (SELECT value FROM json_each(?))` -> `x = ANY(%s)` with the JSON array
  parameter passed as an array (`Translated.arrays`), `json_array`/`json_object` ->
  `json_build_…`, `json_group_array(x)` -> `json_agg` ('[]' when empty, like SQLite); json
  results come back as text, as from SQLite;
- `? IS NULL` -> `CAST(? AS TEXT) IS NULL` (PostgreSQL must know a parameter's type);
- `BEGIN IMMEDIATE` -> `BEGIN` (the batch's transaction; PostgreSQL locks rows, not the file).

Schema statements (`ddl`) give each rowid table a real `rowid` column, map the types
(SQLite's INTEGER is 64-bit: BIGINT; `INTEGER PRIMARY KEY` is an identity column), drop
`STRICT` / `WITHOUT ROWID`, and turn `json_valid(x)` checks into a `jsonb` cast. What has no
mechanical equivalent (FTS5 virtual tables and their triggers) is refused here;
`vault/pg/schema.py` gives those statements explicit PostgreSQL variants, and a store whose
query semantics differ (full-text search, `INSERT OR REPLACE`, PRAGMAs) carries its own
PostgreSQL variant beside the SQLite one.
Literals ('…') and quoted identifiers ("…") are never rewritten.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import NamedTuple

from gateway.core.errors import VaultError

RESERVED = ("user", "window")

# One token at a time: a string literal, a quoted identifier, or something to rewrite.
_TOKENS = re.compile(
    r"""(?P<lit>'(?:[^']|'')*')"""
    r"""|(?P<ident>"(?:[^"]|"")*")"""
    r"""|(?P<is>\bIS\s+(?P<not>NOT\s+)?(?!(?:NULL|TRUE|FALSE|UNKNOWN|DISTINCT|NOT)\b)(?=[?:\w]))"""
    r"""|(?P<named>(?<![:\w]):[A-Za-z_]\w*\x01?)"""
    r"""|(?P<qmark>\?\x01?)"""
    r"""|(?P<pct>%)"""
    r"""|(?P<word>\b(?:""" + "|".join(RESERVED) + r""")\b)""",
    re.IGNORECASE,
)
_OR_IGNORE = re.compile(r"\bINSERT\s+OR\s+IGNORE\s+INTO\b", re.IGNORECASE)
_OR_OTHER = re.compile(r"\bINSERT\s+OR\s+(REPLACE|ABORT|FAIL|ROLLBACK)\b", re.IGNORECASE)
_RETURNING = re.compile(r"\bRETURNING\b", re.IGNORECASE)
_SCALAR_MINMAX = re.compile(r"\b(max|min)\(([^(),]+),([^(),]+)\)", re.IGNORECASE)
_BEGIN = re.compile(r"^\s*BEGIN\s+(IMMEDIATE|DEFERRED|EXCLUSIVE)\s*$", re.IGNORECASE)
_PRAGMA = re.compile(r"^\s*PRAGMA\b", re.IGNORECASE)


class Translated(NamedTuple):
    sql: str
    arrays: tuple[int | str, ...]  # parameters (by position or name) to pass as arrays


def _rewrite_tokens(sql: str, *, params: bool = True) -> Translated:
    arrays: list[int | str] = []
    position = 0

    def one(match: re.Match[str]) -> str:
        nonlocal position
        kind = match.lastgroup
        text = match.group(0)
        array = text.endswith(_ARRAY)
        text = text.rstrip(_ARRAY)
        if kind == "qmark":
            if array:
                arrays.append(position)
            position += 1
        elif kind == "named" and array:
            arrays.append(text[1:])
        if kind == "is":
            return "IS DISTINCT FROM " if match.group("not") else "IS NOT DISTINCT FROM "
        if kind == "named":
            return f"%({text[1:]})s"
        if kind == "qmark":
            return "%s"
        if kind == "pct":
            return "%%" if params else "%"
        if kind == "word":
            return f'"{text.lower()}"'
        if kind == "lit" and params:
            return text.replace("%", "%%")
        return text

    return Translated(_TOKENS.sub(one, sql), tuple(arrays))


def _or_ignore(sql: str) -> str:
    if not _OR_IGNORE.search(sql):
        return sql
    sql = _OR_IGNORE.sub("INSERT INTO", sql)
    returning = _RETURNING.search(sql)
    if returning is None:
        return sql.rstrip().rstrip(";") + " ON CONFLICT DO NOTHING"
    at = returning.start()
    return f"{sql[:at].rstrip()} ON CONFLICT DO NOTHING {sql[at:]}"


_UPSERT = re.compile(
    r"\bINSERT\s+INTO\s+(?P<table>\w+).*?\bDO\s+UPDATE\s+SET\b(?P<set>.*?)"
    r"(?=\bRETURNING\b|$)",
    re.IGNORECASE | re.DOTALL,
)
_NOT_COLUMNS = frozenset(
    [
        "case",
        "when",
        "then",
        "else",
        "end",
        "and",
        "or",
        "not",
        "null",
        "is",
        "in",
        "like",
        "between",
        "true",
        "false",
        "distinct",
        "from",
        "excluded",
        "as",
        "cast",
        "where",
    ]
)
_BARE = re.compile(r"'(?:[^']|'')*'|(?<![.\w])([A-Za-z_]\w*)\b(?!\s*[.(])")


def _qualified(expression: str, table: str) -> str:
    def one(match: re.Match[str]) -> str:
        word = match.group(1)
        if word is None or word.lower() in _NOT_COLUMNS:
            return match.group(0)
        return f"{table}.{word}"

    return _BARE.sub(one, expression)


def _split_top(text: str, separator: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for at, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == separator and depth == 0:
            parts.append(text[start:at])
            start = at + 1
    parts.append(text[start:])
    return parts


def _upsert(sql: str) -> str:
    found = _UPSERT.search(sql)
    if found is None:
        return sql
    table, clause = found.group("table"), found.group("set")
    where = re.search(r"\bWHERE\b", clause, re.IGNORECASE)
    assignments, condition = (
        (clause[: where.start()], clause[where.start() :]) if where else (clause, "")
    )
    items = []
    for item in _split_top(assignments, ","):
        target, _, value = item.partition("=")
        items.append(f"{target}={_qualified(value, table)}")
    rewritten = ",".join(items) + _qualified(condition, table)
    return sql[: found.start("set")] + rewritten + sql[found.end("set") :]


_ARRAY = "\x01"  # marks a placeholder whose JSON array parameter goes in as an array
_JSON_EACH = re.compile(
    r"\bIN\s*\(\s*SELECT\s+value\s+FROM\s+json_each\(\s*(\?|:\w+)\s*\)\s*\)", re.IGNORECASE
)
_JSON_FUNCTIONS = re.compile(r"\bjson_(array|object|group_array)\(", re.IGNORECASE)


# `? IS NULL`: a parameter PostgreSQL can infer no type for (None, or a str sent untyped).
_PARAM_IS_NULL = re.compile(r"(\?|(?<![:\w]):\w+)(\s+IS\s+(?:NOT\s+)?NULL\b)", re.IGNORECASE)


def _json(sql: str) -> str:
    sql = _JSON_EACH.sub(lambda m: f"= ANY({m.group(1)}{_ARRAY})", sql)
    out, at = [], 0
    for found in _JSON_FUNCTIONS.finditer(sql):
        if found.start() < at:
            continue
        out.append(sql[at : found.start()])
        kind = found.group(1).lower()
        if kind != "group_array":
            out.append(f"json_build_{kind}(")
            at = found.end()
            continue
        depth, end = 1, found.end()
        while depth and end < len(sql):
            depth += {"(": 1, ")": -1}.get(sql[end], 0)
            end += 1
        inner = _json(sql[found.end() : end - 1])
        out.append(f"coalesce(json_agg({inner}), '[]'::json)")
        at = end
    out.append(sql[at:])
    return "".join(out)


@lru_cache(maxsize=4096)
def translate(sql: str) -> Translated:
    """A store's statement as PostgreSQL runs it (see the module docstring)."""
    if _PRAGMA.match(sql):
        raise VaultError(f"PRAGMA has no PostgreSQL equivalent: {sql.strip()[:60]}")
    if _BEGIN.match(sql):
        return Translated("BEGIN", ())
    if (other := _OR_OTHER.search(sql)) is not None:
        raise VaultError(f"INSERT OR {other.group(1).upper()} needs a PostgreSQL variant")
    sql = _SCALAR_MINMAX.sub(
        lambda m: (
            f"{'GREATEST' if m.group(1).lower() == 'max' else 'LEAST'}({m.group(2)},{m.group(3)})"
        ),
        sql,
    )
    sql = _PARAM_IS_NULL.sub(r"CAST(\1 AS TEXT)\2", sql)
    return _rewrite_tokens(_json(_upsert(_or_ignore(sql))))


def or_query(fts: str) -> str:
    """An FTS5 OR of quoted words (`"a" OR "b"`, what the stores build from user text) as the
    equivalent tsquery (`'a' | 'b'`) for the PostgreSQL variant of a search."""
    words = (w.strip().strip('"').replace("'", "") for w in fts.split(" OR "))
    return " | ".join(f"'{w}'" for w in words if w)


_NOT_PORTABLE = re.compile(r"^\s*CREATE\s+(VIRTUAL\s+TABLE|TRIGGER)\b", re.IGNORECASE)
_ROWID_KEY = re.compile(r"\bINTEGER\s+PRIMARY\s+KEY\b", re.IGNORECASE)
_TYPES = (
    (re.compile(r"\bINTEGER\b", re.IGNORECASE), "BIGINT"),
    (re.compile(r"\bREAL\b", re.IGNORECASE), "DOUBLE PRECISION"),
    (re.compile(r"\bBLOB\b", re.IGNORECASE), "BYTEA"),
)
_TABLE_OPTIONS = re.compile(r"\)\s*STRICT\s*(,\s*WITHOUT\s+ROWID\s*)?$", re.IGNORECASE)
_JSON_VALID = re.compile(r"\bjson_valid\((\w+)\)", re.IGNORECASE)


_CREATE_TABLE = re.compile(r"^\s*CREATE\s+TABLE\b", re.IGNORECASE)
_WITHOUT_ROWID = re.compile(r"\bWITHOUT\s+ROWID\s*$", re.IGNORECASE)
_KEY_COLUMN = re.compile(r"(\w+)\s+INTEGER\s+PRIMARY\s+KEY\b", re.IGNORECASE)


def ddl(statement: str) -> str:
    """A schema statement of a SQLite migration as PostgreSQL runs it.

    Every rowid table gets its `rowid` as a real column, so queries that order or select by
    it mean the same on both: generated from its `INTEGER PRIMARY KEY` (which SQLite makes the
    rowid's alias), or an identity of its own when the key is something else."""
    if _NOT_PORTABLE.match(statement):
        raise VaultError(f"needs an explicit PostgreSQL variant: {statement.strip()[:60]}")
    table = _CREATE_TABLE.match(statement)
    rowid = ""
    if table is not None and not _WITHOUT_ROWID.search(statement):
        key = _KEY_COLUMN.search(statement)
        rowid = (
            f",\n    rowid BIGINT GENERATED ALWAYS AS ({key.group(1)}) STORED"
            if key
            else ",\n    rowid BIGINT GENERATED BY DEFAULT AS IDENTITY UNIQUE"
        )
    sql = _TABLE_OPTIONS.sub(")", statement.rstrip())
    if rowid:
        sql = f"{sql[:-1].rstrip()}{rowid}\n)"
    sql = _ROWID_KEY.sub("BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY", sql)
    for pattern, replacement in _TYPES:
        sql = pattern.sub(replacement, sql)
    sql = _JSON_VALID.sub(r"(\1::jsonb IS NOT NULL)", sql)
    return _rewrite_tokens(sql, params=False).sql
