from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from gateway.app.app import App
from gateway.app.config import Config, Secrets, Settings
from gateway.core.clock import ManualClock
from gateway.core.ports import LLM, Channel, Clock
from tests.fakes import FakeLLM, MemoryChannel
from tests.fakes.postgres import pg_server, pg_url  # noqa: F401  (fixtures)


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makeitem(collector: pytest.Collector, name: str, obj: object) -> None:
    """Every `async def test_…` runs on asyncio through anyio's plugin, without a decorator."""
    if inspect.iscoroutinefunction(obj) and name.startswith("test"):
        pytest.mark.anyio(obj)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def make_config(tmp_path: Path, **sections: dict[str, object]) -> Config:
    data: dict[str, object] = {"vault": {"path": str(tmp_path / "iris.db")}}
    data["auth"] = {"allow": ["memory:*"]}
    data["delivery"] = {"backoff_base_s": 0.0}
    data.update(sections)
    return Config(settings=Settings(**data), secrets=Secrets({}), source=None)


@asynccontextmanager
async def app_serving(app: App, started: asyncio.Event) -> AsyncIterator[None]:
    """`app.serve()` running from when the channel says it started until the block ends;
    leaving stops it and drains every turn."""
    stop = asyncio.Event()
    task = asyncio.create_task(app.serve(stop))
    try:
        await asyncio.wait_for(started.wait(), 5)
        yield
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


def app_with(config: Config, channel: Channel, llm: LLM | None, clock: Clock | None = None) -> App:
    """The real app on one channel and a fake model, on a manual clock unless given one."""
    return App(config=config, channels=[channel], llm_override=llm, use_llm_override=True,
               clock=clock or ManualClock())  # fmt: skip


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
    async with app_with(config, channel, llm) as built:
        yield built
