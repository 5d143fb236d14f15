"""A served run: the workload's engine behind the server until a signal stops it, recorded
as `steptrace run` records a replay (harness/run/end_to_end.py): a run folder under the
workload's output, its manifest saying `trace: served`."""

from __future__ import annotations

from typing import Callable

import numpy as np
import pandas as pd

from engine import LLMEngine

from ..errors import BadInput
from ..io.interrupt import Stop
from ..record.run import Run
from ..run.end_to_end import run_loop
from ..run.planned_run import PlannedRun
from ..workload import Workload
from ..workload.trace import WorkloadTrace
from .loop import ServeLoop
from .server import Server

SUPPORTED = ("one co-located engine in this process (a modeled device, paced to the wall "
             "clock, or a torch device)")


def serve(workload: Workload, host: str, port: int, max_concurrency: int, max_requests: int,
          listening: Callable[[Server], None], stop: Stop) -> Run:
    """Serve until `stop` is set; `listening` is told the server once it is bound. The run
    as written."""
    if workload.disaggregation is not None:
        raise BadInput(f"{workload.path}: serve serves {SUPPORTED}, not a P/D deployment")
    if workload.ranks > 1:
        raise BadInput(f"{workload.path}: serve serves {SUPPORTED}, not {workload.ranks} "
                       f"engine processes")
    run = PlannedRun(workload.arms[0], 0, 0, float(workload.switch_intervals[0]))
    engine = LLMEngine(workload.engine_config(run.arm))
    server = Server(host, port, str(workload.values["model"]),
                    engine.model_config.vocab_size, max_concurrency, max_requests)
    try:
        server.start()
    except OSError as e:
        engine.close()
        raise BadInput(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    loop = ServeLoop(engine, server)
    listening(server)
    return run_loop(workload, _capacity(max_requests), run, loop,
                    dict(off=loop.uncalibrated), stop)


def _capacity(max_requests: int) -> WorkloadTrace:
    """The requests table's rows, one per request the server may take, filled in as they
    arrive."""
    df = pd.DataFrame(dict(arrival_s=np.zeros(max_requests),
                           prompt_len=np.zeros(max_requests, np.int64),
                           max_new_tokens=np.zeros(max_requests, np.int64)))
    return WorkloadTrace(df)
