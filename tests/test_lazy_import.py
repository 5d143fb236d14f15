"""`import engine` stays light: the config, plan, FLOPs, device and model-geometry path never
imports torch, so commands that only read configs, traces or tables start fast."""

import subprocess
import sys

import pytest

import engine

LIGHT = ["engine", "engine.config", "engine.plan", "engine._core", "engine.flops",
         "engine.devices", "engine.model_config", "engine.reference_scheduler"]


def test_the_light_modules_do_not_import_torch():
    code = ("import importlib, sys\n"
            f"for name in {LIGHT!r}:\n"
            "    importlib.import_module(name)\n"
            "from engine import (SchedulerConfig, EngineConfig, Scheduler, ReferenceScheduler,\n"
            "                    FlopsEstimator, load_model_config, load_device_profile, KIND_NAMES)\n"
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines()[-1] == "[]", out.stdout  # last: an editable rebuild may talk


def test_every_public_name_resolves():
    for name in engine.__all__:
        assert getattr(engine, name) is not None, name
    from engine import LLMEngine
    from engine.llm_engine import LLMEngine as defined
    assert LLMEngine is defined and "LLMEngine" in dir(engine)


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="'engine' has no attribute 'Schedular'"):
        _ = engine.Schedular
