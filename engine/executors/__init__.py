"""Executors run a plan's batches: `torch` (a real forward), `modeled` (a roofline),
`null` (nothing: the harness's own cost). ExecutorSpec names one and builds it; each kind's
module is imported only then (torch only for the torch executor)."""

from .base import ExecutorOutput
from .spec import KINDS, Built, ExecutorSpec, ExecutorSpecError

__all__ = ["ExecutorOutput", "KINDS", "Built", "ExecutorSpec", "ExecutorSpecError"]
