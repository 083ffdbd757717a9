"""Faults on purpose: SOCIALBENCH_FAULT_BUSY_MS burns CPU in the named service only."""

from __future__ import annotations

import asyncio
import time

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from pydantic import ValidationError
from starlette.types import Message, Receive, Scope, Send

from socialbench.runtime.faults import BusyRequests, burn_cpu, fault_middleware
from socialbench.runtime.settings import Settings


def test_the_busy_time_is_read_by_service_from_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOCIALBENCH_FAULT_BUSY_MS", '{"home-timeline": 20, "text": 1.5}')

    assert Settings().fault_busy_ms == {"home-timeline": 20.0, "text": 1.5}


@pytest.mark.parametrize(("value", "message"), [
    ('{"home-timelines": 20}', "no service named home-timelines"),
    ('{"text": -1}', "not negative"),
    ("20", "valid dictionary"),
])
def test_a_bad_busy_time_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, value: str,
                                          message: str) -> None:
    monkeypatch.setenv("SOCIALBENCH_FAULT_BUSY_MS", value)

    with pytest.raises((ValidationError, ValueError), match=message):
        Settings()


def busy_app(service: str, settings: Settings) -> FastAPI:
    app = FastAPI(middleware=fault_middleware(service, settings))

    @app.get("/work")
    async def work() -> dict[str, float]:
        return {"ok": 1.0}

    @app.get("/healthz")
    async def healthz() -> dict[str, float]:
        return {"ok": 1.0}

    return app


def test_unset_or_for_another_service_nothing_is_installed() -> None:
    for settings in (Settings(), Settings(fault_busy_ms={"text": 5})):
        app = busy_app("home-timeline", settings)
        assert not any(m.cls is BusyRequests for m in app.user_middleware)


def test_the_named_service_answers_as_before_after_its_busy_time() -> None:
    app = busy_app("home-timeline", Settings(fault_busy_ms={"home-timeline": 30}))
    (middleware,) = [m for m in app.user_middleware if m.cls is BusyRequests]
    assert middleware.kwargs == {"busy_s": 0.03}

    with TestClient(app) as client:
        assert client.get("/work").json() == {"ok": 1.0}


def test_each_request_but_the_operational_ones_burns_cpu() -> None:
    served: list[str] = []

    async def inner(scope: Scope, receive: Receive, send: Send) -> None:
        served.append(scope["path"])

    busy = BusyRequests(inner, busy_s=0.03)

    def cpu_of(path: str) -> float:
        started = time.thread_time()  # the event loop runs in this thread
        asyncio.run(busy({"type": "http", "path": path}, receive_nothing, send_nothing))
        return time.thread_time() - started

    assert cpu_of("/wrk2-api/home-timeline/read") >= 0.03
    assert cpu_of("/healthz") < 0.03
    assert served == ["/wrk2-api/home-timeline/read", "/healthz"]


async def receive_nothing() -> Message:
    return {"type": "http.disconnect"}


async def send_nothing(message: Message) -> None:
    pass


def test_burning_takes_the_cpu_time_asked() -> None:
    started = time.thread_time()
    burn_cpu(0.05)
    assert time.thread_time() - started >= 0.05
