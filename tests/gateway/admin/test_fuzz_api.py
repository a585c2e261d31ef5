"""The admin API under a schema-driven fuzzer: schemathesis reads `/openapi.json` from the real
app's HTTP server on 127.0.0.1 (bearer token, every feature's routes) and runs its examples,
coverage and fuzzing phases — positive and negative requests, seeded and bounded — with every
built-in check: no 5xx, every status and response body as documented, schema-valid requests
accepted, schema-invalid ones refused.

One policy is ours: a schema-valid request may get a 400 when it breaks a rule no schema can
express (a follow-up's time must fall within a year of *now*; a feature's write names
something unknown) — the document says so — but never a 400 or 422 about its JSON or fields,
which would be the schema and the validator disagreeing (`rule_refusals_only`).
"""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from schemathesis.engine import events

from gateway.app.config import Config, Secrets
from tests.conftest import app_with, make_config
from tests.fakes import FakeLLM, MemoryChannel, inbound

TOKEN = "fuzz-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
EXAMPLES_USER = "12345"  # the document's examples say telegram:12345: make them real


class ServedApp:
    """The whole app with its HTTP server, on an event loop in a thread of its own
    (schemathesis calls the server synchronously from the test's thread)."""

    def __init__(self, tmp_path: Path) -> None:
        base = make_config(tmp_path, http={"enabled": True, "port": 0},
                           auth={"allow": ["telegram:*"]})  # fmt: skip
        self.config = Config(settings=base.settings, secrets=Secrets({"IRIS_API_TOKEN": TOKEN}),
                             source=None)  # fmt: skip
        self.base_url = ""
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="served-app")

    def __enter__(self) -> ServedApp:
        self._thread.start()
        if not self._ready.wait(30) or self._failure is not None:
            self._thread.join(5)
            raise RuntimeError("the app did not start") from self._failure
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)
        assert not self._thread.is_alive()
        if self._failure is not None:
            raise self._failure

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # handed to the test's thread
            self._failure = exc
            self._ready.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        channel = MemoryChannel(name="telegram")
        async with app_with(self.config, channel, FakeLLM()) as app:
            assert app.http is not None
            hello = inbound("hi", user=EXAMPLES_USER, chat=EXAMPLES_USER, channel="telegram")
            await app.router.submit(hello)
            self.base_url = f"http://127.0.0.1:{app.http.port}"
            self._ready.set()
            await self._stop.wait()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedApp]:
    with ServedApp(tmp_path_factory.mktemp("fuzz")) as app:
        yield app


@schemathesis.check
def rule_refusals_only(ctx: Any, response: Any, case: Any) -> bool | None:
    """A schema-valid request refused with 400 must be refused for a rule, not its JSON."""
    if case.meta is None or not case.meta.generation.mode.is_positive:
        return None
    if response.status_code == 400 and response.json().get("error") == "malformed JSON":
        raise AssertionError(f"schema-valid body refused as malformed: {response.text}")
    return None


def fuzz(base_url: str, *, max_examples: int) -> tuple[list[str], dict[str, int]]:
    """Run schemathesis' engine against the live server: the failures, and how many requests
    each operation got."""
    config = schemathesis.Config.from_dict(
        {
            "seed": 14,
            "workers": 1,
            "headers": AUTH,
            "generation": {
                "max-examples": max_examples,
                "deterministic": True,
                "database": "none",
            },
            "phases": {"stateful": {"enabled": False}},
            "checks": {
                "positive_data_acceptance": {
                    "expected-statuses": ["2xx", "400", "401", "403", "404", "409"]
                }
            },
        }
    )
    schema = schemathesis.openapi.from_url(f"{base_url}/openapi.json", headers=AUTH,
                                           config=config)  # fmt: skip
    failures: list[str] = []
    requests: dict[str, int] = {}
    for event in schemathesis.engine.from_schema(schema).execute():
        if isinstance(event, events.ScenarioFinished):
            recorder = event.recorder
            requests[recorder.label] = requests.get(recorder.label, 0) + len(recorder.interactions)
            for checks in recorder.checks.values():
                for check in checks:
                    if check.failure_info is not None:
                        failure = check.failure_info.failure
                        failures.append(
                            f"{recorder.label} [{check.name}] {failure.title}: {failure.message}"
                            f"\n    {check.failure_info.code_sample}"
                        )
        elif isinstance(event, events.NonFatalError | events.FatalError):
            failures.append(f"engine error: {event!r}")
    return failures, requests


def test_the_server_does_what_its_openapi_document_says(
    served: ServedApp, caplog: pytest.LogCaptureFixture
) -> None:
    failures, requests = fuzz(served.base_url, max_examples=8)
    assert failures == [], "\n".join(sorted(set(failures)))
    tracebacks = [r.getMessage() for r in caplog.records if r.exc_info]
    assert tracebacks == []  # bad input never reaches the log as an exception
    # Every operation of the document was exercised, each with more than a handful of requests.
    assert {"POST /proactive/intent", "GET /proactive/quota", "GET /stats"} <= set(requests)
    # (An operation that takes no input at all can only be asked a few ways.)
    paths = document(served.base_url)["paths"]
    inputless = {
        f"{method.upper()} {path}"
        for path, ops in paths.items()
        for method, op in ops.items()
        if not op.get("parameters") and "requestBody" not in op
    }
    assert min(n for label, n in requests.items() if label not in inputless) >= 10, requests
    assert min(requests.values()) >= 3, requests


def document(base_url: str) -> dict[str, Any]:
    request = urllib.request.Request(f"{base_url}/openapi.json", headers=AUTH)
    with urllib.request.urlopen(request, timeout=10) as answer:
        found: dict[str, Any] = json.load(answer)
    return found
