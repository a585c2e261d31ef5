"""Editing `config.toml` and `.env` in place, for `iris init`.

Re-running `iris init` must edit, never clobber: only the keys it sets are touched, in place;
every other line — comments, other sections, keys it does not know — stays as it was. That is
why this is a line editor and not "parse, change, dump" (tomllib cannot write, and a dump would
drop every comment). It handles what `iris init` writes: one key per line, values that are
strings, numbers, booleans or arrays of strings (an array may span lines).

`.env` files are written with mode 0600 from the first byte (created with that mode, not
chmod-ed afterwards), and an existing one is brought down to 0600 when it is rewritten.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path

Value = str | int | float | bool | list[str]

_SECTION = re.compile(r"^\s*\[([A-Za-z0-9_.-]+)\]\s*(#.*)?$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def toml_value(value: Value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    return json.dumps(value, ensure_ascii=False)  # a TOML basic string is a JSON string


def _key_at(line: str, key: str) -> bool:
    return re.match(rf"^\s*{re.escape(key)}\s*=", line) is not None


def _value_end(lines: list[str], start: int) -> int:
    """The index after the last line of the value starting on line `start`."""
    depth = 0
    for end in range(start, len(lines)):
        # Count array brackets outside strings and comments (an array may span lines).
        text = re.sub(r'"(\\.|[^"\\])*"|\'[^\']*\'', "", lines[end]).split("#", 1)[0]
        depth += text.count("[") - text.count("]")
        if depth <= 0:
            return end + 1
    return len(lines)


def set_toml(text: str, values: Mapping[tuple[str, str], Value]) -> str:
    """`text` with each `(section, key)` set to its value, everything else unchanged."""
    lines = text.splitlines()
    for (section, key), value in values.items():
        line = f"{key} = {toml_value(value)}"
        current, after, found = None, None, False  # after: the section's last line + 1
        for index, raw in enumerate(lines):
            match = _SECTION.match(raw)
            if match:
                current = match.group(1)
                if current == section:
                    after = index + 1
                continue
            if current == section and _key_at(raw, key):
                lines[index : _value_end(lines, index)] = [line]
                found = True
                break
            if current == section and raw.strip():
                after = index + 1
        if found:
            continue
        if after is None:
            if lines and lines[-1].strip():
                lines.append("")
            lines += [f"[{section}]", line]
        else:
            lines.insert(after, line)
    return "\n".join(lines) + "\n"


def env_line(name: str, value: str) -> str:
    if re.fullmatch(r"[A-Za-z0-9_./:+=@-]*", value):
        return f"{name}={value}"
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return f'{name}="{escaped}"'


def set_env(text: str, values: Mapping[str, str]) -> str:
    """`text` (a .env file) with each variable set; other lines and comments unchanged."""
    lines = text.splitlines()
    for name, value in values.items():
        if not _ENV_NAME.match(name):
            raise ValueError(f"not a variable name: {name!r}")
        pattern = re.compile(rf"^\s*(export\s+)?{name}\s*=")
        for index, raw in enumerate(lines):
            if pattern.match(raw):
                lines[index] = env_line(name, value)
                break
        else:
            lines.append(env_line(name, value))
    return "\n".join(lines) + "\n"


def write_private(path: Path, text: str) -> None:
    """Write `text` to `path` readable by its owner only (0600), atomically."""
    staging = path.with_name(path.name + ".new")
    fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # O_CREAT's mode does not apply to a file left over earlier
        os.write(fd, text.encode("utf-8"))
    finally:
        os.close(fd)
    os.replace(staging, path)


def write_text(path: Path, text: str) -> None:
    staging = path.with_name(path.name + ".new")
    staging.write_text(text, encoding="utf-8")
    os.replace(staging, path)
