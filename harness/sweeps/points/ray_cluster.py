"""A Ray cluster's processes running a sweep's points (`--ray ADDRESS`): the same task the
host's pool runs, one Ray task a point (one CPU each), on a cluster already started
(`ray start --head`, then `ray start --address` on the other machines).

Each task writes its point's folder itself, so the sweep's output must be a path every
node sees (a shared filesystem): the driver reads each point's marker there, as resume
does (docs/sweeps.md, "Ray"). Ray is an optional extra, imported only here.
"""

from __future__ import annotations

import signal
import socket
from concurrent.futures import Executor, Future
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterator, List

INSTALL = 'pip install -e ".[ray]" in a checkout, or pip install "steptrace[ray]"'
PROBE_S = 5
STOPPED_WITHIN_S = 60  # a cancelled point's run stops at its next step


class ClusterError(RuntimeError):
    """Ray is missing or the cluster cannot be reached (bad input: exit 2)."""


class RayTasks(Executor):
    """Each submitted call a Ray task of one CPU, not retried (a point whose process dies
    fails, as in the host's pool); its result in a future."""

    def __init__(self, ray):
        self._ray = ray
        self._remotes: Dict[Callable, Any] = {}
        self.refs: List[Any] = []

    def submit(self, fn, /, *args, **kwargs) -> Future:
        if fn not in self._remotes:
            self._remotes[fn] = self._ray.remote(num_cpus=1, max_retries=0)(fn)
        ref = self._remotes[fn].remote(*args, **kwargs)
        self.refs.append(ref)
        return ref.future()

    def cpus(self) -> int:
        """The cluster's CPUs now: how many points run at once."""
        return max(1, int(self._ray.cluster_resources().get("CPU", 1)))

    def cancel_all(self) -> None:
        """Queued tasks never start; running ones get a KeyboardInterrupt, which stops
        their run as Ctrl-C stops `steptrace run`; waited for, so no point is left
        running behind the sweep."""
        for ref in self.refs:
            self._ray.cancel(ref)
        if self.refs:
            self._ray.wait(self.refs, num_returns=len(self.refs), timeout=STOPPED_WITHIN_S)


def import_ray():
    try:
        import ray
    except ImportError:
        raise ClusterError(f"Ray is not installed; install the ray extra: {INSTALL}") from None
    return ray


def connect(address: str):
    """Ray, connected as a driver to the cluster at `address`; ClusterError if Ray is not
    installed or no cluster answers there."""
    ray = import_ray()
    _answers(address)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        ray.init(address=address, log_to_driver=False, logging_level="ERROR")
    except (ConnectionError, ValueError, RuntimeError) as e:
        raise ClusterError(f"no Ray cluster reached at {address}: {e}") from None
    finally:  # ray.init makes SIGTERM exit at once: the command's handler stops the sweep
        for signum, handler in handlers.items():
            if handler is not None:
                signal.signal(signum, handler)
    return ray


def _answers(address: str) -> None:
    """A host:port where nothing listens is said at once: Ray's driver waits minutes on it."""
    host, _, port = address.rpartition(":")
    if not (host and port.isdigit()) or "/" in host:
        return  # "auto", ray://...: Ray's own forms, left to it
    try:
        socket.create_connection((host, int(port)), timeout=PROBE_S).close()
    except OSError as e:
        raise ClusterError(f"nothing answers at {address} ({e.strerror or e}); start "
                           f"the cluster's head first: ray start --head --port {port}") from None


@contextmanager
def ray_tasks(ray) -> Iterator[RayTasks]:
    """An executor of the connected cluster for the block; on an exception (a signal) its
    tasks are cancelled before the driver disconnects."""
    tasks = RayTasks(ray)
    try:
        yield tasks
    except BaseException:
        tasks.cancel_all()
        raise
    finally:
        ray.shutdown()
