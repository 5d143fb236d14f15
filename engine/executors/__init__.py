"""Executors run a plan's batches: `torch` (a real forward), `modeled` (a roofline),
`null` (nothing: the harness's own cost)."""

from .base import ExecutorOutput
from .modeled import ModeledExecutor
from .null import NullExecutor
from .torch_executor import TorchExecutor

__all__ = ["ExecutorOutput", "ModeledExecutor", "NullExecutor", "TorchExecutor"]
