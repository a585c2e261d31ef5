"""Configuration: `config.toml` plus `IRIS_<SECTION>__<KEY>` environment overrides.

Loaded once, validated completely, before anything starts. Every problem becomes one line naming
the key path (`llm.max_tokens: ...`) and never echoes the value, so a secret pasted into the wrong
key does not end up in a terminal or a log. Secrets are read from the environment only (or the
`.env` file beside the config, see `config_sources.py`): they are not fields of the TOML model,
so a secret written into the file is an "unknown key" error.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, ValidationInfo, field_validator
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)
from pydantic_settings.exceptions import SettingsError
from pydantic_settings.sources.utils import parse_env_vars

from gateway.analyzer.settings import AnalyzerSection
from gateway.app.config_channels import SlackSection, TelegramSection
from gateway.app.config_sources import (
    env_file_for,
    known_keys,
    lists_from_csv,
    merged_environment,
    suggest,
)
from gateway.app.config_vault import VaultSection
from gateway.core.errors import ConfigError
from gateway.core.ids import id_problem
from gateway.features.settings import Section
from gateway.knowledge.settings import KnowledgeSection
from gateway.limits.settings import LimitsSection
from gateway.subscriptions.settings import SubscriptionsSection
from gateway.suggestions.settings import SuggestionsSection
from proactive.settings import ProactiveSection

DEFAULT_CONFIG_FILE = Path("config.toml")
ENV_PREFIX = "IRIS_"

# The environment `load_config` was handed; tests pass their own mapping instead of os.environ.
_ENVIRON: ContextVar[Mapping[str, str] | None] = ContextVar("iris_config_env", default=None)


class LLMSection(Section):
    model: str = Field("claude-sonnet-5-5", min_length=1)
    base_url: str = ""
    max_tokens: int = Field(2048, ge=16, le=20000)
    # The most a turn waits for the model (retries and Retry-After waits included); before
    # `timeout_s`, whose check reads it.
    turn_deadline_seconds: float = Field(30.0, gt=0, le=600)
    timeout_s: float = Field(20.0, gt=0)
    max_retries: int = Field(2, ge=0, le=5)
    max_concurrency: int = Field(32, ge=1, le=1024)
    max_tool_rounds: int = Field(6, ge=1, le=50)

    @field_validator("base_url")
    @classmethod
    def _model_api_root(cls, value: str) -> str:
        if value and not value.startswith(("https://", "http://")):
            raise ValueError(
                "must be empty (Anthropic's API) or the API root with its scheme, like "
                "https://api.anthropic.com"
            )
        return value

    @field_validator("timeout_s")
    @classmethod
    def _inside_deadline(cls, value: float, info: ValidationInfo) -> float:
        deadline = info.data.get("turn_deadline_seconds")
        if deadline is not None and value >= deadline:
            raise ValueError("must be less than turn_deadline_seconds (one request's stall "
                             "timeout has to fit inside the turn's deadline)")  # fmt: skip
        return value


class AuthSection(Section):
    # Entries are "<channel>:<user id>" or "<channel>:*". An empty `allow` admits admins only.
    admins: tuple[str, ...] = ()
    allow: tuple[str, ...] = ()
    # A stranger's daily notice carries a pairing code an admin can answer with /admin allow.
    pairing: bool = True

    @field_validator("admins", "allow", mode="before")
    @classmethod
    def _one_entry(cls, value: object) -> object:
        """`allow = "telegram:1"` (a string, not a list): one entry, or several separated by
        commas, as in an `IRIS_AUTH__ALLOW` variable."""
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    @field_validator("admins", "allow")
    @classmethod
    def _entries(cls, value: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        for entry in value:
            problem = id_problem(entry, wildcard=info.field_name == "allow")
            if problem is not None:
                raise ValueError(f"'{entry[:60]}': {problem}")
        return tuple(dict.fromkeys(value))  # the same id twice is once


class ContextSection(KnowledgeSection):
    """`[context]`: the pipeline's budget and sources, plus the knowledge feature's keys."""

    max_tokens: int = Field(24000, ge=512)
    history_messages: int = Field(40, ge=0, le=1000)
    memories: int = Field(5, ge=0, le=50)
    persona: str = (
        "You are Iris, a helpful assistant people reach through chat. Be concise and concrete."
    )


class RouterSection(Section):
    max_concurrency: int = Field(32, ge=1, le=1024)
    max_message_chars: int = Field(8000, ge=1)
    drain_timeout_s: float = Field(10.0, ge=0)
    resume_max_age_minutes: float = Field(60.0, gt=0)


class DeliverySection(Section):
    max_attempts: int = Field(5, ge=1, le=20)
    backoff_base_s: float = Field(1.0, ge=0)
    backoff_max_s: float = Field(60.0, ge=0)
    max_inline_wait_s: float = Field(5.0, ge=0, le=60)
    give_up_after_minutes: float = Field(60.0, ge=0, le=7 * 24 * 60)


class HTTPSection(Section):
    enabled: bool = False
    host: str = "127.0.0.1"
    port: int = Field(8787, ge=0, le=65535)


class LogSection(Section):
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"


class Settings(BaseSettings):
    """Everything that is not a secret. Sources by priority: environment, then TOML."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter="__",
        extra="forbid",
        hide_input_in_errors=True,
        frozen=True,
    )

    vault: VaultSection = VaultSection()
    llm: LLMSection = LLMSection()
    auth: AuthSection = AuthSection()
    context: ContextSection = ContextSection()
    router: RouterSection = RouterSection()
    delivery: DeliverySection = DeliverySection()
    http: HTTPSection = HTTPSection()
    telegram: TelegramSection = TelegramSection()
    slack: SlackSection = SlackSection()
    proactive: ProactiveSection = ProactiveSection()
    analyzer: AnalyzerSection = AnalyzerSection()
    limits: LimitsSection = LimitsSection()
    subscriptions: SubscriptionsSection = SubscriptionsSection()
    suggestions: SuggestionsSection = SuggestionsSection()
    log: LogSection = LogSection()

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The TOML document arrives as init kwargs; the environment overrides it.
        return (_environment(settings_cls), init_settings)


def _environment(settings_cls: type[BaseSettings]) -> EnvSettingsSource:
    """The environment source, reading the mapping `load_config` was handed when there is one.

    pydantic-settings has no public parameter for an environment other than `os.environ`; the
    source's public `env_vars` attribute holds what it read, so it is replaced here (with the
    library's own parser) instead of overriding a private loader method.
    """
    source = EnvSettingsSource(settings_cls)
    env = _ENVIRON.get()
    if env is not None:
        source.env_vars = parse_env_vars(
            env, source.case_sensitive, source.env_ignore_empty, source.env_parse_none_str
        )
    return source


SECRET_NAMES = (
    "ANTHROPIC_API_KEY",
    "TELEGRAM_BOT_TOKEN",
    "TELEGRAM_WEBHOOK_SECRET",
    "SLACK_BOT_TOKEN",
    "SLACK_APP_TOKEN",
    "SLACK_SIGNING_SECRET",
    "IRIS_API_TOKEN",
)


@dataclass(frozen=True, slots=True)
class Secrets:
    """Secrets from the environment. `repr` never shows the values."""

    values: Mapping[str, str]

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Secrets:
        return cls({name: env[name] for name in SECRET_NAMES if env.get(name, "").strip()})

    def get(self, name: str) -> str | None:
        return self.values.get(name)

    def missing(self) -> list[str]:
        return [name for name in SECRET_NAMES if name not in self.values]

    def __repr__(self) -> str:
        return f"Secrets(set={sorted(self.values)})"


@dataclass(frozen=True, slots=True)
class Config:
    settings: Settings
    secrets: Secrets
    source: Path | None
    # Said once at start (e.g. a `.env` others can read); nothing stops.
    warnings: tuple[str, ...] = ()


_SECRET_WORDS = ("key", "token", "secret", "password")


def _format_error(err: Any, env: Mapping[str, str]) -> str:
    path = ".".join(str(part) for part in err["loc"]) or "<root>"
    # A value set by an `IRIS_SECTION__KEY` variable is named by it: the key is in no file.
    variable = ENV_PREFIX + "__".join(str(part) for part in err["loc"]).upper()
    if variable in {name.upper() for name in env}:
        path = f"{path} (set by {variable})"
    if err["type"] == "extra_forbidden":
        loc = tuple(err["loc"])
        hint = suggest(str(loc[-1]), known_keys(Settings, loc))
        if not hint and any(word in str(loc[-1]).lower() for word in _SECRET_WORDS):
            hint = f" (secrets go in the environment or .env: {', '.join(SECRET_NAMES)})"
        return f"{path}: unknown key{hint}"
    return f"{path}: {err['msg'].removeprefix('Value error, ')}"


def _unknown_env_keys(env: Mapping[str, str]) -> list[str]:
    """`IRIS_SECTION__KEY` variables naming no section; pydantic ignores those silently."""
    problems = []
    for name in env:
        if name.startswith(ENV_PREFIX) and "__" in name:
            section = name[len(ENV_PREFIX) :].lower().partition("__")[0]
            if section not in Settings.model_fields:
                hint = suggest(section, sorted(Settings.model_fields))
                problems.append(f"{name}: unknown section '{section}'{hint}")
    return problems


def resolve_config_path(explicit: Path | None) -> Path | None:
    if explicit is not None:
        if explicit.is_dir():
            raise ConfigError([f"--config: {explicit} is a directory, not a config file"])
        if not explicit.is_file():
            raise ConfigError([f"--config: file not found: {explicit}"])
        return explicit
    return DEFAULT_CONFIG_FILE if DEFAULT_CONFIG_FILE.is_file() else None


def _read_toml(path: Path) -> dict[str, Any]:
    try:  # utf-8-sig: a byte order mark some editors write is not TOML's business
        return tomllib.loads(path.read_bytes().decode("utf-8-sig"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError([f"{path}: invalid TOML: {exc}"]) from exc
    except UnicodeDecodeError as exc:
        raise ConfigError([f"{path}: not UTF-8 text (byte {exc.start}); save it as UTF-8"]) from exc
    except OSError as exc:
        raise ConfigError([f"{path}: cannot read: {exc.strerror}"]) from exc


def load_config(
    path: Path | None = None, env: Mapping[str, str] | None = None, *, secrets: bool = True
) -> Config:
    """Load and validate everything; raise ConfigError listing every problem. Without
    `secrets`, the secrets an enabled feature needs may still be missing (a command that only
    prints something from the configuration, run before the tokens exist)."""
    source = resolve_config_path(path)
    env, warnings = merged_environment(env_file_for(source), os.environ if env is None else env)
    env = lists_from_csv(env, Settings, ENV_PREFIX)
    data = _read_toml(source) if source else {}
    problems = _unknown_env_keys(env)
    settings: Settings | None = None
    token = _ENVIRON.set(env)
    try:
        settings = Settings(**data)
    except ValidationError as exc:
        problems.extend(_format_error(err, env) for err in exc.errors())
    except SettingsError as exc:  # an override pydantic-settings cannot parse (bad JSON)
        problems.append(f"environment: {exc}; lists are JSON or comma-separated")
    finally:
        _ENVIRON.reset(token)
    if problems or settings is None:
        raise ConfigError(problems)
    found = Secrets.from_env(env)
    problems = check_required_secrets(settings, found) if secrets else []
    problems += check_http_needed(settings)
    problems += settings.limits.unpriced(
        {"llm.model": settings.llm.model, "analyzer.confirm_model": settings.analyzer.confirm_model}
    )
    if problems:
        raise ConfigError(problems)
    return Config(settings=settings, secrets=found, source=source, warnings=tuple(warnings))


def secrets_needed(settings: Settings) -> list[tuple[str, str]]:
    """(secret, what needs it) for this configuration only: what `iris doctor` lists."""
    needed = [("ANTHROPIC_API_KEY", "the model")]
    if settings.telegram.enabled:
        needed.append(("TELEGRAM_BOT_TOKEN", "[telegram] enabled"))
        if settings.telegram.mode == "webhook":
            needed.append(("TELEGRAM_WEBHOOK_SECRET", "[telegram] mode = webhook"))
    if settings.slack.enabled:
        needed.append(("SLACK_BOT_TOKEN", "[slack] enabled"))
        if settings.slack.mode == "socket":
            needed.append(("SLACK_APP_TOKEN", "[slack] mode = socket"))
        else:
            needed.append(("SLACK_SIGNING_SECRET", "[slack] mode = http"))
    if settings.http.enabled:
        needed.append(("IRIS_API_TOKEN", "the admin HTTP API (optional)"))
    return needed


def check_required_secrets(settings: Settings, secrets: Secrets) -> list[str]:
    """Secrets an enabled feature cannot run without."""
    needed: list[tuple[str, str]] = []
    if settings.telegram.enabled:
        needed.append(("telegram.enabled", "TELEGRAM_BOT_TOKEN"))
        if settings.telegram.mode == "webhook":
            needed.append(("telegram.mode", "TELEGRAM_WEBHOOK_SECRET"))
    if settings.slack.enabled:
        needed.append(("slack.enabled", "SLACK_BOT_TOKEN"))
        mode_secret = (
            "SLACK_APP_TOKEN" if settings.slack.mode == "socket" else "SLACK_SIGNING_SECRET"
        )
        needed.append(("slack.mode", mode_secret))
    problems = [
        f"{key}: requires the environment variable {name}"
        for key, name in needed
        if secrets.get(name) is None
    ]
    if settings.slack.enabled:  # the channel refuses other kinds of token at start
        shapes = [("SLACK_BOT_TOKEN", "xoxb-", "a bot token")]
        if settings.slack.mode == "socket":
            shapes.append(("SLACK_APP_TOKEN", "xapp-", "an app-level token"))
        problems += [
            f"{name}: must be {what} (it starts with {prefix})"
            for name, prefix, what in shapes
            if not (secrets.get(name) or prefix).startswith(prefix)
        ]
    return problems


def check_http_needed(settings: Settings) -> list[str]:
    """Transport modes that receive through our HTTP server need it enabled."""
    problems = []
    if settings.telegram.enabled and settings.telegram.mode == "webhook":
        if not settings.http.enabled:
            problems.append("telegram.mode: webhook mode needs [http] enabled = true")
        if not settings.telegram.webhook_url:
            problems.append("telegram.webhook_url: required in webhook mode")
    if settings.slack.enabled and settings.slack.mode == "http" and not settings.http.enabled:
        problems.append("slack.mode: http mode needs [http] enabled = true")
    return problems
