"""The loop a run drives its engines with (Loop), and the four that run in this process:
one engine stepped by the Python loop (driver.py) or the C++ one (native.py), and a P/D
deployment's instances in the Python discrete-event loop (disaggregated.py) or the C++
one. Engine processes, one per device, are the fifth (harness/ranks/loop.py);
harness/run/loops.py builds the one a workload asks for.

The C++ loops replay the modeled virtual clock without a Python frame per step; the Python
ones are their reference (equal tables for a seed but for host timings) and replay
everything else: the real clock, the GIL's arms, the frontend's thread.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Dict, List, Optional, Protocol, Sequence, Tuple, Type

from engine.disaggregation import Disaggregation

from ..record.recorder import Recorder
from .disaggregated import Instance, replay_disaggregated
from .driver import Requests, replay
from .frontend import Frontend
from .native import replay_disaggregated_native, replay_native

Progress = Optional[Callable[[int, int], None]]  # (requests done, requests) between steps


class Loop(Protocol):
    """What drives a run's engines through its requests."""

    instances: Sequence[Tuple[str, int, Any]]  # (role, index, engine) of each instance
    frontend: Optional[Frontend]  # the serving frontend's thread, on the real clock
    uncalibrated: Optional[str]  # why the harness's cost is not calibrated; None: it is
    recorder_type: Type[Recorder]  # the run's (one over processes is fed their chunks)

    def manifest(self) -> Dict[str, Any]:
        """What the run's manifest records of the loop beyond its engines."""

    def run(self, requests: Requests, recorder: Recorder, progress: Progress,
            stop: threading.Event, start: float) -> bool:
        """Replay to completion, or until `stop` is set; True if completed. `start` is the
        perf_counter() value of the real clock's zero."""

    def output_tokens(self) -> Dict[int, List[int]]:
        """The output token ids by request, of every engine."""

    def close(self) -> None:
        """The frontend's thread and the engines ended; idempotent."""


class _InProcess:
    """A loop whose engines are in this process."""

    recorder_type: Type[Recorder] = Recorder
    uncalibrated: Optional[str] = None

    def __init__(self, instances: Sequence[Tuple[str, int, Any]],
                 frontend: Optional[Frontend] = None) -> None:
        self.instances, self.frontend = instances, frontend

    def manifest(self) -> Dict[str, Any]:
        return {}

    def output_tokens(self) -> Dict[int, List[int]]:
        return {i: t for _, _, engine in self.instances
                for i, t in engine.output_tokens().items()}

    def close(self) -> None:
        if self.frontend is not None:  # every committed token delivered, unless stopped
            self.frontend.close()
        for _, _, engine in self.instances:
            engine.close()


class PythonLoop(_InProcess):
    """One engine on the real or the virtual clock, a Python frame per step."""

    def __init__(self, engine, clock: str, frontend: Optional[Frontend] = None) -> None:
        super().__init__([("colocated", 0, engine)], frontend)
        self.clock = clock

    def run(self, requests, recorder, progress, stop, start) -> bool:
        return replay(self.instances[0][2], requests, self.clock, recorder, progress, start,
                      stop, frontend=self.frontend)


class NativeLoop(_InProcess):
    """One engine on a modeled device, on the virtual clock, in C++."""

    def __init__(self, engine) -> None:
        super().__init__([("colocated", 0, engine)])

    def run(self, requests, recorder, progress, stop, start) -> bool:
        return replay_native(self.instances[0][2], requests, recorder, progress, stop)


class _PD(_InProcess):
    """A P/D deployment's instances on modeled devices, one discrete-event loop on the
    virtual clock."""

    uncalibrated: Optional[str] = "off: a P/D deployment's harness cost is not calibrated"

    def __init__(self, service: Disaggregation, instances) -> None:
        super().__init__(instances)
        self.service = service

    def _instances(self, recorder: Recorder) -> List[Instance]:
        return [Instance(role, k, engine, log)
                for (role, k, engine), log in zip(self.instances, recorder.logs)]


class PythonPDLoop(_PD):
    def run(self, requests, recorder, progress, stop, start) -> bool:
        arrived = recorder.arrived if requests.concurrency or requests.sessions is not None \
            else lambda i, t: None
        return replay_disaggregated(self.service, self._instances(recorder), requests,
                                    self.instances[0][2].model_config, arrived, progress, stop)


class NativePDLoop(_PD):
    def run(self, requests, recorder, progress, stop, start) -> bool:
        return replay_disaggregated_native(self.service, self._instances(recorder), requests,
                                           self.instances[0][2].model_config, recorder,
                                           progress, stop)
