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


def test_redis_is_one_server_a_primary_with_replicas_or_a_cluster() -> None:
    assert Settings().redis_mode == "standalone"
    replicated = Settings(redis_mode="replicated", redis_url="redis://primary:6379/2",
                          redis_replica_urls="redis://replica-1:6379/2, redis://replica-2")
    assert replicated.redis_replica_urls.count("redis://") == 2
    cluster = Settings(redis_mode="cluster",
                       redis_url="redis://:pw@node-1:7000,redis://:pw@node-2:7000")
    assert cluster.redis_mode == "cluster"
    wrong = {
        "only redis_mode=cluster takes several": {
            "redis_url": "redis://a:1,redis://b:2"},
        "needs redis_replica_urls": {"redis_mode": "replicated"},
        "is also in redis_replica_urls": {
            "redis_mode": "replicated", "redis_url": "redis://a:1",
            "redis_replica_urls": "redis://a:1"},
        "redis_replica_urls is for redis_mode=replicated": {
            "redis_replica_urls": "redis://a:1"},
        "only database 0": {"redis_mode": "cluster", "redis_url": "redis://a:1/3"},
        "redis_cluster_wait_replicas is for redis_mode=cluster": {
            "redis_cluster_wait_replicas": 1},
        "not a redis://": {"redis_mode": "cluster", "redis_url": "redis://a:1,a:2"},
        "given twice": {"redis_mode": "cluster", "redis_url": "redis://a:1,redis://a:1/0"},
        "Input should be 'standalone', 'replicated' or 'cluster'": {"redis_mode": "sentinel"},
    }
    for message, fields in wrong.items():
        with pytest.raises(ValueError, match=message):
            Settings(**fields)  # type: ignore[arg-type]
