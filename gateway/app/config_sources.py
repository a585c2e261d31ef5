"""Where configuration comes from besides `config.toml`, and how its mistakes are named.

- The `.env` file next to the config (or in the working directory when there is no config
  file): secrets and `IRIS_…` overrides as `NAME=value` lines, the file `iris init` writes.
  Parsed with python-dotenv, the parser pydantic-settings itself uses for its dotenv support
  (already installed with it); the process environment wins over the file, as in
  pydantic-settings. A file that others can read is reported, not refused: the owner decides.
- Environment overrides of list keys: pydantic-settings wants JSON (`'["telegram:1"]'`);
  people write `telegram:1,slack:U2`. A value that is not a JSON list is read as a
  comma-separated list instead, so the override works rather than ending in a traceback.
- Unknown keys: the closest known name (difflib) is suggested.
"""

from __future__ import annotations

import difflib
import json
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any, get_origin

from dotenv import dotenv_values
from pydantic import BaseModel

from gateway.core.errors import ConfigError

ENV_FILE = ".env"


def env_file_for(config_path: Path | None) -> Path:
    """The `.env` that belongs to this config: beside it, or in the working directory."""
    return (config_path.parent if config_path is not None else Path()) / ENV_FILE


def shared_mode(path: Path) -> str:
    """The file's mode (e.g. "644") when its group or other users have any access to it, else
    "" (also when it cannot be read): for files that hold secrets or conversations."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return ""
    return f"{stat.S_IMODE(mode):o}" if mode & (stat.S_IRWXG | stat.S_IRWXO) else ""


def read_env_file(path: Path) -> tuple[dict[str, str], list[str]]:
    """The file's values (empty when it does not exist) and warnings about it."""
    if not path.exists():
        return {}, []
    warnings = []
    if shared := shared_mode(path):
        warnings.append(
            f"{path} holds secrets and others can read it (mode {shared}); run: chmod 600 {path}"
        )
    try:
        values = {k: v for k, v in dotenv_values(path, encoding="utf-8").items() if v is not None}
    except UnicodeDecodeError as exc:
        raise ConfigError([f"{path}: not UTF-8 text (byte {exc.start}); save it as UTF-8"]) from exc
    except OSError as exc:
        raise ConfigError([f"{path}: cannot read: {exc.strerror}"]) from exc
    return values, warnings


def merged_environment(path: Path, environ: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """`.env` values under the real environment (which wins)."""
    values, warnings = read_env_file(path)
    return {**values, **environ}, warnings


def _field_model(model: type[BaseModel], name: str) -> type[BaseModel] | None:
    field = model.model_fields.get(name)
    kind = field.annotation if field is not None else None
    return kind if isinstance(kind, type) and issubclass(kind, BaseModel) else None


def lists_from_csv(
    env: Mapping[str, str], settings: type[BaseModel], prefix: str
) -> dict[str, str]:
    """`IRIS_AUTH__ALLOW=telegram:1,slack:U2` as the JSON list pydantic-settings parses."""
    fixed = dict(env)
    for name, value in env.items():
        if not name.upper().startswith(prefix) or "__" not in name:
            continue
        section, _, key = name[len(prefix) :].lower().partition("__")
        model = _field_model(settings, section)
        field = model.model_fields.get(key) if model is not None else None
        if field is None or get_origin(field.annotation) not in (tuple, list):
            continue
        try:
            if isinstance(json.loads(value), list):
                continue
        except ValueError:
            pass
        items = [item.strip() for item in value.split(",") if item.strip()]
        fixed[name] = json.dumps(items)
    return fixed


def suggest(name: str, known: list[str]) -> str:
    """` (did you mean 'model'?)`, or nothing when no known name is close."""
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def known_keys(settings: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """The keys valid at `loc`'s parent in the settings tree."""
    model: type[BaseModel] | None = settings
    for part in loc[:-1]:
        model = _field_model(model, str(part)) if model is not None else None
    return sorted(model.model_fields) if model is not None else []
