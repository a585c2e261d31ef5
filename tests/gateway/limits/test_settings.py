"""`[limits]`: defaults, the price table, and a one-line error for each kind of bad line."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.app.config import load_config
from gateway.core.errors import ConfigError
from gateway.limits.settings import DEFAULT_PRICES, LimitsSection


def problems(tmp_path: Path, text: str) -> list[str]:
    path = tmp_path / "config.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_config(path, env={})
    return caught.value.problems


def loaded(tmp_path: Path, text: str) -> LimitsSection:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return load_config(path, env={}).settings.limits


def test_defaults_cap_spending_and_price_the_current_models(tmp_path: Path) -> None:
    limits = loaded(tmp_path, "")
    assert (limits.user_usd_per_day, limits.user_usd_per_month, limits.global_usd_per_day) == (
        5.0,
        50.0,
        50.0,
    )
    assert (limits.user_tokens_per_day, limits.user_messages_per_minute) == (0, 0)
    assert limits.admins_exempt is False
    sonnet = limits.prices["claude-sonnet-5-5"]
    assert (sonnet.input, sonnet.output, sonnet.cache_write, sonnet.cache_read) == (
        2.0,
        10.0,
        2.5,
        0.1,
    )
    assert {"claude-haiku-5-5", "claude-opus-5-5"} <= set(limits.prices)


def test_a_price_entry_adds_to_the_defaults_and_derives_cache_prices(tmp_path: Path) -> None:
    limits = loaded(
        tmp_path,
        "[llm]\nmodel = 'my-proxy-model'\n"
        "[limits.prices.my-proxy-model]\ninput = 3.0\noutput = 15.0\n",
    )
    mine = limits.prices["my-proxy-model"]
    assert (mine.cache_write, round(mine.cache_read, 6)) == (3.75, 0.3)
    assert set(DEFAULT_PRICES) < set(limits.prices)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[limits]\nuser_usd_per_day = -1\n", "limits.user_usd_per_day: "),
        ("[limits]\nuser_tokens_per_day = -5\n", "limits.user_tokens_per_day: "),
        ("[limits]\nglobal_usd_per_day = nan\n", "limits.global_usd_per_day: "),
        ("[limits]\nuser_messages_per_minute = 'many'\n", "limits.user_messages_per_minute: "),
        ("[limits]\nuser_usd_per_dya = 1\n", "limits.user_usd_per_dya: unknown key"),
        (
            "[limits.prices.claude-sonnet-5-5]\ninput = -2.0\noutput = 10.0\n",
            "limits.prices.claude-sonnet-5-5.input: ",
        ),
        ("[limits.prices.cheap]\ninput = 1.0\n", "limits.prices.cheap.output: "),
    ],
)
def test_bad_values_are_one_line_naming_the_key(tmp_path: Path, text: str, expected: str) -> None:
    found = problems(tmp_path, text)
    assert len(found) == 1, found
    assert found[0].startswith(expected), found


def test_a_model_without_a_price_is_an_error_while_a_usd_limit_is_set(tmp_path: Path) -> None:
    text = "[llm]\nmodel = 'claude-next'\n[analyzer]\nconfirm_model = 'claude-tiny'\n"
    found = problems(tmp_path, text)
    assert [line.split(":")[0] for line in found] == ["llm.model", "analyzer.confirm_model"]
    assert "'claude-next'" in found[0] and "[limits.prices]" in found[0]
    # Without a USD limit nothing needs a price: the token and message limits still work.
    off = "[limits]\nuser_usd_per_day = 0\nuser_usd_per_month = 0\nglobal_usd_per_day = 0\n"
    assert loaded(tmp_path, text + off).user_usd_per_day == 0


def test_the_example_documents_every_limits_key() -> None:
    example = (Path(__file__).parents[3] / "config.toml.example").read_text()
    section = example[example.index("[limits]") : example.index("[log]")]
    for key in LimitsSection.model_fields:
        if key != "prices":
            assert f"\n{key} = " in section, key
    for model in ("claude-opus-5-5", "claude-sonnet-5-5", "claude-haiku-5-5"):
        assert f"[limits.prices.{model}]" in section
