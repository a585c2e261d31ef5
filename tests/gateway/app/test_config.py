from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gateway.app.config import ConfigError, load_config, resolve_config_path


def problems(path: Path | None = None, env: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config(path, env=env or {})
    return info.value.problems


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


def test_defaults_without_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = load_config(None, env={})
    assert config.settings.llm.model == "claude-sonnet-5-5"
    assert config.settings.auth.allow == ()
    assert config.source is None


def test_example_config_is_valid() -> None:
    example = Path(__file__).parents[3] / "config.toml.example"
    assert load_config(example, env={}).settings.http.host == "127.0.0.1"


def test_missing_explicit_file_is_an_error(tmp_path: Path) -> None:
    assert problems(tmp_path / "nope.toml") == [
        f"--config: file not found: {tmp_path / 'nope.toml'}"
    ]


def test_unknown_key_names_the_path(tmp_path: Path) -> None:
    path = write(tmp_path, "[llm]\nmodle = 'x'\n")
    assert problems(path) == ["llm.modle: unknown key (did you mean 'model'?)"]


def test_secret_in_file_is_rejected_without_echoing_it(tmp_path: Path) -> None:
    path = write(tmp_path, "[llm]\napi_key = 'sk-very-secret'\n")
    found = problems(path)
    assert found == [
        "llm.api_key: unknown key (secrets go in the environment or .env: ANTHROPIC_API_KEY, "
        "TELEGRAM_BOT_TOKEN, TELEGRAM_WEBHOOK_SECRET, SLACK_BOT_TOKEN, SLACK_APP_TOKEN, "
        "SLACK_SIGNING_SECRET, IRIS_API_TOKEN)"
    ]
    assert "sk-very-secret" not in " ".join(found)


def test_a_single_id_where_a_list_goes_is_taken_as_one(tmp_path: Path) -> None:
    """`allow = "telegram:1"` said "Input should be a valid tuple"."""
    path = write(tmp_path, '[auth]\nallow = "telegram:1"\nadmins = "telegram:2, slack:U1"\n')
    auth = load_config(path, env={}).settings.auth
    assert (auth.allow, auth.admins) == (("telegram:1",), ("telegram:2", "slack:U1"))
    [found] = problems(write(tmp_path, '[auth]\nallow = "nocolon"\n'))
    assert found.startswith("auth.allow: 'nocolon': ids look like")


def test_wrong_type_and_bad_values_one_line_each(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "[llm]\nmax_tokens = 'lots'\n[proactive]\ndefault_timezone = 'Mars/Olympus'\n"
        "scan_cron = '61 * * * *'\n[auth]\nallow = ['nocolon']\n",
    )
    found = problems(path)
    assert len(found) == 4
    keys = sorted(line.split(":")[0] for line in found)
    assert keys == [
        "auth.allow",
        "llm.max_tokens",
        "proactive.default_timezone",
        "proactive.scan_cron",
    ]
    assert "lots" not in " ".join(found)


def test_a_time_zone_too_long_for_a_path_is_a_bad_value(tmp_path: Path) -> None:
    # 300 characters reach the file system as a name too long to open (OSError, no ValueError).
    for name in ("A" * 300, "Europe/" + "B" * 300):
        path = write(tmp_path, f"[proactive]\ndefault_timezone = '{name}'\n")
        found = problems(path)
        assert len(found) == 1 and found[0].startswith("proactive.default_timezone: ")


def test_a_byte_order_mark_is_read_past_and_a_directory_is_named(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_bytes(b"\xef\xbb\xbf[llm]\nmax_tokens = 100\n")  # as some editors save it
    assert load_config(path, env={}).settings.llm.max_tokens == 100
    with pytest.raises(ConfigError) as info:
        resolve_config_path(tmp_path)
    assert info.value.problems == [f"--config: {tmp_path} is a directory, not a config file"]


def test_a_model_api_root_without_its_scheme_is_a_bad_value(tmp_path: Path) -> None:
    path = write(tmp_path, "[llm]\nbase_url = 'api.anthropic.com'\n")
    [found] = problems(path)
    assert found.startswith("llm.base_url: ") and "https://api.anthropic.com" in found
    assert load_config(write(tmp_path, "[llm]\nbase_url = 'http://127.0.0.1:9'\n"), env={})


def test_an_empty_vault_path_is_a_bad_value_not_a_crash_at_start(tmp_path: Path) -> None:
    [found] = problems(write(tmp_path, "[vault]\npath = ''\n"))
    assert found == "vault.path: must name the vault's file, e.g. iris.db"
    [found] = problems(write(tmp_path, ""), env={"IRIS_VAULT__PATH": ""})
    assert found.startswith("vault.path (set by IRIS_VAULT__PATH): must name the vault's file")


def test_invalid_toml_is_reported(tmp_path: Path) -> None:
    path = write(tmp_path, "[llm\n")
    assert "invalid TOML" in problems(path)[0]


def test_a_config_or_env_file_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_bytes('[persona]\nname = "l\u00e9g\u00e8re"\n'.encode("latin-1"))
    assert problems(path) == [f"{path}: not UTF-8 text (byte 19); save it as UTF-8"]
    path.write_text("[llm]\nmax_tokens = 100\n")
    env = tmp_path / ".env"
    env.write_bytes("IRIS_PERSONA__NAME=l\u00e9g\u00e8re\n".encode("latin-1"))
    env.chmod(0o600)
    found = problems(path)
    assert len(found) == 1 and found[0].startswith(f"{env}: not UTF-8 text"), found


def test_env_overrides_file(tmp_path: Path) -> None:
    path = write(tmp_path, "[llm]\nmodel = 'claude-haiku-5-5'\nmax_tokens = 100\n")
    config = load_config(path, env={"IRIS_LLM__MODEL": "claude-opus-5-5"})  # priced models
    assert config.settings.llm.model == "claude-opus-5-5"
    assert config.settings.llm.max_tokens == 100


def test_env_list_value_and_unknown_env_section(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, ""), env={"IRIS_AUTH__ALLOW": '["telegram:1"]'})
    assert config.settings.auth.allow == ("telegram:1",)
    assert problems(write(tmp_path, ""), {"IRIS_LMM__MODEL": "x"}) == [
        "IRIS_LMM__MODEL: unknown section 'lmm' (did you mean 'llm'?)"
    ]


def test_enabled_channel_requires_its_secret(tmp_path: Path) -> None:
    path = write(tmp_path, "[telegram]\nenabled = true\n")
    assert problems(path) == [
        "telegram.enabled: requires the environment variable TELEGRAM_BOT_TOKEN"
    ]
    assert (
        load_config(path, env={"TELEGRAM_BOT_TOKEN": "123:abc"}).secrets.get("TELEGRAM_BOT_TOKEN")
        == "123:abc"
    )


def test_slack_tokens_of_the_wrong_kind_and_a_bad_command_are_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "[slack]\nenabled = true\n")
    env = {"SLACK_BOT_TOKEN": "xoxp-user-token", "SLACK_APP_TOKEN": "xoxb-not-an-app-token"}
    found = problems(path, env)
    assert found == [
        "SLACK_BOT_TOKEN: must be a bot token (it starts with xoxb-)",
        "SLACK_APP_TOKEN: must be an app-level token (it starts with xapp-)",
    ]
    assert "user-token" not in " ".join(found)
    good = {"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_APP_TOKEN": "xapp-1"}
    assert load_config(path, env=good).settings.slack.command == "/iris"
    for command in ("iris", "/Iris", "/iris bot", "/" + "x" * 32):
        bad = write(tmp_path, f"[slack]\nenabled = true\ncommand = '{command}'\n")
        (line,) = problems(bad, good)
        assert line.startswith("slack.command: must be a slash command")
    bad = write(tmp_path, "[slack]\napi_url = 'not a url'\n")
    (line,) = problems(bad)
    assert line.startswith("slack.api_url: must be the Web API root")


def test_secrets_repr_hides_values(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, ""), env={"ANTHROPIC_API_KEY": "sk-hidden"})
    assert "sk-hidden" not in repr(config.secrets)
    assert config.secrets.missing()[0] == "TELEGRAM_BOT_TOKEN"


def test_cli_exits_2_with_one_line_per_problem(tmp_path: Path) -> None:
    path = write(tmp_path, "[llm]\nbogus = 1\nmax_tokens = -5\n")
    result = subprocess.run(
        [sys.executable, "-m", "gateway.app", "doctor", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert lines == [
        "config error: llm.max_tokens: Input should be greater than or equal to 16",
        "config error: llm.bogus: unknown key",
    ]


def test_the_stall_timeout_must_fit_inside_the_turn_deadline(tmp_path: Path) -> None:
    defaults = load_config(None, env={}).settings.llm
    assert defaults.timeout_s < defaults.turn_deadline_seconds
    inside = "must be less than turn_deadline_seconds"
    assert problems(write(tmp_path, "[llm]\ntimeout_s = 30\n")) == [
        f"llm.timeout_s: {inside} (one request's stall timeout has to fit inside the turn's "
        "deadline)"
    ]
    env = {"IRIS_LLM__TURN_DEADLINE_SECONDS": "5", "IRIS_LLM__TIMEOUT_S": "5"}
    assert [p.split(":")[0] for p in problems(env=env)] == [
        "llm.timeout_s (set by IRIS_LLM__TIMEOUT_S)"
    ]
    bad = problems(env={"IRIS_LLM__TURN_DEADLINE_SECONDS": "0", "IRIS_LLM__MAX_CONCURRENCY": "0"})
    assert [p.split(":")[0] for p in bad] == [
        "llm.turn_deadline_seconds (set by IRIS_LLM__TURN_DEADLINE_SECONDS)",
        "llm.max_concurrency (set by IRIS_LLM__MAX_CONCURRENCY)",
    ]


def test_a_bad_inline_wait_for_delivery_is_one_line_naming_the_key(tmp_path: Path) -> None:
    assert load_config(None, env={}).settings.delivery.max_inline_wait_s == 5.0
    for value in ("-1", "61", "'soon'"):
        found = problems(write(tmp_path, f"[delivery]\nmax_inline_wait_s = {value}\n"))
        assert len(found) == 1 and found[0].startswith("delivery.max_inline_wait_s: ")


@pytest.mark.parametrize(
    ("line", "key"),
    [
        ("replica_id = 'two words'", "vault.replica_id"),
        ("leader_retry_s = 60", "vault.leader_retry_s"),
        ("inbound_lease_s = 1", "vault.inbound_lease_s"),
        ("inbound_poll_s = 5", "vault.inbound_poll_s"),
        ("outbox_lease_s = 1", "vault.outbox_lease_s"),
        ("outbox_lease_s = 'long'", "vault.outbox_lease_s"),
    ],
)
def test_bad_replica_settings_are_one_line_naming_the_key(
    tmp_path: Path, line: str, key: str
) -> None:
    found = problems(write(tmp_path, f"[vault]\n{line}\n"))
    assert len(found) == 1 and found[0].startswith(f"{key}: ")


@pytest.mark.parametrize(
    ("line", "key"),
    [
        ("webhook_lease_s = 1", "subscriptions.webhook_lease_s"),
        ("webhook_lease_s = 'long'", "subscriptions.webhook_lease_s"),
        ("stream_poll_s = 5", "subscriptions.stream_poll_s"),
        ("stream_poll_s = 0", "subscriptions.stream_poll_s"),
    ],
)
def test_bad_replica_subscription_settings_are_one_line_naming_the_key(
    tmp_path: Path, line: str, key: str
) -> None:
    found = problems(write(tmp_path, f"[subscriptions]\n{line}\n"))
    assert len(found) == 1 and found[0].startswith(f"{key}: ")
