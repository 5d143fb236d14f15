"""The engine: scheduler core (C++), configuration, and the reference scheduler."""

from ._core import Scheduler
from .config import SchedulerConfig
from .plan import KIND_CHUNK, KIND_DECODE, KIND_FINAL, KIND_NAMES
from .reference_scheduler import ReferenceScheduler

__all__ = ["Scheduler", "SchedulerConfig", "ReferenceScheduler",
           "KIND_CHUNK", "KIND_FINAL", "KIND_DECODE", "KIND_NAMES"]
__version__ = "0.1.0"
