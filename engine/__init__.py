"""The engine: the C++ scheduler core, the reference scheduler, the model, Worker and
LLMEngine, the FLOPs estimator and device profiles."""

from ._core import Scheduler
from .config import EngineConfig, SchedulerConfig
from .devices import DeviceInfo, DeviceProfile, detect_device, load_device_profile
from .flops import FlopsEstimator, StepFlops
from .llm_engine import LLMEngine, StepRecord
from .model_config import ModelConfig, load_model_config
from .plan import KIND_CHUNK, KIND_DECODE, KIND_FINAL, KIND_NAMES
from .reference_scheduler import ReferenceScheduler

__all__ = ["Scheduler", "SchedulerConfig", "ReferenceScheduler", "EngineConfig", "LLMEngine",
           "StepRecord", "FlopsEstimator", "StepFlops", "ModelConfig", "load_model_config",
           "DeviceInfo", "DeviceProfile", "detect_device", "load_device_profile",
           "KIND_CHUNK", "KIND_FINAL", "KIND_DECODE", "KIND_NAMES"]
__version__ = "0.1.0"
