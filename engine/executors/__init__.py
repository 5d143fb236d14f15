"""Executors run a plan's batches: `torch` (a real forward), `modeled` (a roofline)."""

from .base import ExecutorOutput
from .modeled import ModeledExecutor
from .torch_executor import TorchExecutor

__all__ = ["ExecutorOutput", "ModeledExecutor", "TorchExecutor"]
