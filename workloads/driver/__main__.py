"""Entry point of one driver worker process, started by ``run_load``: ``FD INDEX``."""

from socialbench.workloads.driver.worker import main

main()
