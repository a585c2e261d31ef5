from __future__ import annotations

import inspect
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.app import App
from gateway.clock import ManualClock
from gateway.config import Config, Secrets, Settings
from tests.fakes import FakeLLM, MemoryChannel


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if isinstance(item, pytest.Function) and inspect.iscoroutinefunction(item.obj):
            item.add_marker(pytest.mark.anyio)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def make_config(tmp_path: Path, **sections: dict[str, object]) -> Config:
    data: dict[str, object] = {"vault": {"path": str(tmp_path / "iris.db")}}
    data["auth"] = {"allow": ["memory:*"]}
    data["delivery"] = {"backoff_base_s": 0.0}
    data.update(sections)
    return Config(settings=Settings(**data), secrets=Secrets({}), source=None)


@pytest.fixture
def config(tmp_path: Path) -> Config:
    return make_config(tmp_path)


@pytest.fixture
def llm() -> FakeLLM:
    return FakeLLM()


@pytest.fixture
def channel() -> MemoryChannel:
    return MemoryChannel()


@pytest.fixture
async def app(config: Config, llm: FakeLLM, channel: MemoryChannel) -> AsyncIterator[App]:
    async with App(
        config=config,
        channels=[channel],
        llm_override=llm,
        use_llm_override=True,
        clock=ManualClock(),
    ) as built:
        yield built
