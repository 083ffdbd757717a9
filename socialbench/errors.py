"""The one root of the tools' errors: every error a socialbench tool raises on purpose.

    SocialbenchError
     ├── MissingExtra           an extra not installed (socialbench.extras; an ImportError)
     ├── LoginSecretMissing     serve without the login secret (runtime.settings)
     ├── stack (socialbench.stack)
     │    ├── StackError            the local stack did not start or stop as asked
     │    ├── ServerNotInstalled    a store's server binary is missing
     │    └── CpuChoiceError        up --cpus names CPUs it may not use (a ValueError)
     ├── workloads (socialbench.workloads)
     │    ├── WorkloadError         a workload that cannot be loaded (a ValueError)
     │    ├── UnknownPreset         no preset of that name (a ValueError)
     │    ├── GraphFormatError      a graph file that cannot be read (a ValueError)
     │    ├── SeedError             seeding failed
     │    │    └── SeedInterrupted      stopped; run it again to continue
     │    ├── UndoFailed            compose-post's removals failed in part (the bulk path)
     │    ├── DriverError           the load driver could not run
     │    ├── StoppedBeforeWindow   the load stopped before its measured window
     │    ├── CalibrationError      the host's calibration could not run
     │    ├── CacheLoadError        the cache generator could not run
     │    ├── EnergyError           the energy meter asked for is not there, or --cpu-family
     │    │                         or --power-coefficients cannot be used (a ValueError)
     │    ├── CoefficientsError     a coefficients file that cannot be read (a ValueError)
     │    ├── ContainerError        no Docker engine, or no running container
     │    ├── PodError              the Kubernetes API failed
     │    ├── BundleError           not a readable bundle (a ValueError)
     │    │    └── IncomparableError    bundles that cannot be compared
     │    └── AbError               the A/B run could not go on
     ├── FetchError             the collector has no bundle to give (socialbench.deploy)
     └── NoStack                no local stack to measure (socialbench.bench)

Each keeps the builtin base it had (RuntimeError unless said), so an ``except`` of that
still catches it; the CLI catches the root to print the message and exit 1.

Not under this root: the services' own errors (:class:`socialbench.runtime.errors.ServiceError`,
each an HTTP answer, raised and caught inside a service), the runtime's store-client errors,
and the private errors caught where they are raised (a pool's connect error, a worker's
lost parent, the cache wire protocol's, the load collector's answers to its drivers).
"""

from __future__ import annotations


class SocialbenchError(Exception):
    """Base of every error a socialbench tool raises on purpose; the message says why."""
