"""The engine: the C++ scheduler core, the reference scheduler, the model, Worker and
LLMEngine, the FLOPs estimator and device profiles.

Names load on first use (PEP 562): `import engine`, and the config, plan, FLOPs, device
and model-geometry modules, never import torch; only the model, Worker, executors and
LLMEngine do. tests/test_lazy_import.py holds this.
"""

import importlib

_WHERE = {  # public name -> the submodule that defines it
    "Scheduler": "._core",
    "SchedulerConfig": ".config", "EngineConfig": ".config",
    "DeviceInfo": ".devices", "DeviceProfile": ".devices", "detect_device": ".devices",
    "load_device_profile": ".devices",
    "FlopsEstimator": ".flops", "StepFlops": ".flops",
    "LLMEngine": ".llm_engine", "StepRecord": ".llm_engine",
    "ModelConfig": ".model_config", "load_model_config": ".model_config",
    "KIND_CHUNK": ".plan", "KIND_DECODE": ".plan", "KIND_FINAL": ".plan", "KIND_NAMES": ".plan",
    "ReferenceScheduler": ".reference_scheduler",
}

__all__ = list(_WHERE)
__version__ = "0.1.0"


def __getattr__(name):
    if name not in _WHERE:
        raise AttributeError(f"module 'engine' has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name], __name__), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__():
    return sorted(set(globals()) | set(_WHERE))

