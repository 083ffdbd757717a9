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
