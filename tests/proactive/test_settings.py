"""The `[proactive]` keys this engine adds: spacing, the release window, the scan's zone, the
gate's round cap and `dormancy.enabled` — their defaults, that they take effect, and that a bad
value is one line naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.app.config import ConfigError, load_config
from proactive.engine import EngineConfig
from proactive.policy import PolicyConfig
from proactive.settings import ProactiveSection
from tests.proactive.support import DAY, harness


def problems(tmp_path: Path, text: str, env: dict[str, str] | None = None) -> list[str]:
    path = tmp_path / "config.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path, env=env or {})
    return info.value.problems


def test_defaults_and_what_they_become() -> None:
    section = ProactiveSection()
    policy = PolicyConfig.from_section(section)
    assert (policy.min_spacing_ms, policy.release_window_ms) == (90 * 60_000, 120 * 60_000)
    engine = EngineConfig.from_section(section)
    assert (engine.scan_timezone, engine.dormancy_enabled) == ("UTC", True)
    assert section.gate_max_rounds == 4


def test_values_from_the_file_and_the_environment(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(
        "[proactive]\nmin_spacing_minutes = 45\nrelease_window_minutes = 0\n"
        "scan_timezone = 'Europe/Berlin'\n[proactive.dormancy]\nenabled = false\n"
    )
    section = load_config(path, env={"IRIS_PROACTIVE__GATE_MAX_ROUNDS": "2"}).settings.proactive
    assert section.min_spacing_minutes == 45
    assert section.release_window_minutes == 0
    assert section.scan_timezone == "Europe/Berlin"
    assert section.dormancy.enabled is False
    assert section.gate_max_rounds == 2
    off = load_config(path, env={"IRIS_PROACTIVE__DORMANCY__ENABLED": "true"}).settings
    assert off.proactive.dormancy.enabled is True


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("min_spacing_minutes = -5", "proactive.min_spacing_minutes"),
        ("min_spacing_minutes = 'soon'", "proactive.min_spacing_minutes"),
        ("min_spacing_minutes = 2000", "proactive.min_spacing_minutes"),  # over a day
        ("release_window_minutes = -1", "proactive.release_window_minutes"),
        ("scan_timezone = 'Mars/Olympus'", "proactive.scan_timezone"),
        ("gate_max_rounds = 0", "proactive.gate_max_rounds"),
        ("dormancy = { enabled = 'maybe' }", "proactive.dormancy.enabled"),
        ("dormancy = { enable = false }", "proactive.dormancy.enable"),
    ],
)
def test_a_bad_value_is_one_line_naming_the_key(tmp_path: Path, text: str, key: str) -> None:
    found = problems(tmp_path, f"[proactive]\n{text}\n")
    assert len(found) == 1, found
    assert found[0].startswith(f"{key}:"), found


async def test_dormancy_off_finds_no_dormant_users(tmp_path: Path) -> None:
    for enabled, expected in ((True, 1), (False, 0)):
        (tmp_path / str(enabled)).mkdir()
        async with harness(tmp_path / str(enabled), dormancy_enabled=enabled) as h:
            await h.user("quiet")
            h.clock.advance(8 * DAY / 1000)
            found = await h.engine().scan()
            assert found.dormant_user == expected
