from __future__ import annotations

import pytest

from socialbench import registry
from socialbench.runtime.settings import Settings


def test_every_registry_service_has_a_url_from_its_registry_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for spec in registry.SERVICES:
        monkeypatch.setenv(spec.url_env, f"http://{spec.name}.example:{spec.port + 1}")
    settings = Settings()
    for spec in registry.SERVICES:
        assert settings.url_of(spec.name) == f"http://{spec.name}.example:{spec.port + 1}"


def test_without_its_variable_a_service_is_at_the_neighbour_host_and_registry_port(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for spec in registry.SERVICES:
        monkeypatch.delenv(spec.url_env, raising=False)
    monkeypatch.setenv("SOCIALBENCH_POST_STORAGE_URL", "")
    settings = Settings(neighbour_host="10.0.0.7")
    for spec in registry.SERVICES:
        assert settings.url_of(spec.name) == f"http://10.0.0.7:{spec.port}"


def test_an_unknown_service_is_a_clear_error() -> None:
    with pytest.raises(KeyError, match="unknown service 'nope'"):
        Settings().url_of("nope")


def test_the_memcached_address_is_one_server_or_a_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOCIALBENCH_MEMCACHED_ADDRESS", "10.0.0.1:11211, cache-2:11212,[::1]:7")
    assert Settings().memcached_servers == [("10.0.0.1", 11211), ("cache-2", 11212),
                                            ("::1", 7)]
    assert Settings(memcached_address=":11211").memcached_servers == [("127.0.0.1", 11211)]
    for wrong in ("", "cache", "cache:http", "a:1,a:1", "a:70000"):
        with pytest.raises(ValueError, match="memcached_address"):
            Settings(memcached_address=wrong)
