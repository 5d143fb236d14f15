"""Executors run a plan's batches: `torch` (the real forward),
`modeled:<profile>` (kernel tables or a roofline), `emulated:<profile>` (the host's side
for real, the device modeled; docs/gil.md), `null` (nothing: the harness's own cost).
ExecutorSpec names one and builds it; each kind's module is imported only then (torch only
for the torch executor).

A modeled step is timed from the profile's kernel tables where it has them, else from a
roofline of its FLOPs and bytes (modeled.py); the emulated executor runs the host's packing
and launches for real and waits out the roofline with the GIL released (emulated.py)."""

from .base import ExecutorOutput
from .spec import KINDS, Built, ExecutorSpec, ExecutorSpecError

__all__ = ["ExecutorOutput", "KINDS", "Built", "ExecutorSpec", "ExecutorSpecError"]
