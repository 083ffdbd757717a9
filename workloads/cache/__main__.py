"""Entry point of one cache generator process, started by ``run_cache``: ``FD INDEX``."""

from socialbench.workloads.cache.worker import main

main()
