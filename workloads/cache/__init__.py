"""A memtier_benchmark-style load generator for memcached and Redis (``socialbench cache``).

    from socialbench.workloads.cache import CacheConfig, run_cache

    result = run_cache(CacheConfig(port=11211, pipeline=16, test_time_s=10))
    result.ops_per_s, result.latency["get"].p99_ms, result.hits, result.misses
"""

from socialbench.workloads.cache.config import CacheConfig, CacheProtocol, KeyPattern
from socialbench.workloads.cache.result import CacheResult
from socialbench.workloads.cache.runner import CacheLoadError, run_cache, run_many

__all__ = [
    "CacheConfig",
    "CacheLoadError",
    "CacheProtocol",
    "CacheResult",
    "KeyPattern",
    "run_cache",
    "run_many",
]
