"""One run as a sweep plans it (harness/sweeps/gil_protocol.py) and run_once runs it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PlannedRun:
    arm: str  # the run's gil_mode label, a key of harness/workload/arms.py's ARMS
    block: int  # the repeat this run belongs to
    order: int  # its place within the block, from 0
    switch_interval_s: float  # sys.setswitchinterval during the run
