"""ExecutorSpec: the one reading of `torch`, `null` and `modeled:<profile>`."""

import pytest

from engine.config import EngineConfig
from engine.executors import KINDS, ExecutorSpec, ExecutorSpecError


@pytest.mark.parametrize("text, kind, profile, modeled", [
    ("torch", "torch", None, False),
    ("null", "null", None, False),
    ("modeled:H200", "modeled", "H200", True),
    ("modeled:Ascend 950PR", "modeled", "Ascend 950PR", True),
])
def test_parse_and_write_back(text, kind, profile, modeled):
    spec = ExecutorSpec.parse(text)
    assert (spec.kind, spec.profile, spec.modeled) == (kind, profile, modeled)
    assert str(spec) == text


@pytest.mark.parametrize("text, words", [
    ("cuda", "executor must be torch, modeled:<profile>, emulated:<profile> or null; got 'cuda'"),
    ("modeled", "executor must be torch, modeled:<profile>, emulated:<profile> or null; got 'modeled'"),
    ("null:H200", "executor must be torch, modeled:<profile>, emulated:<profile> or null; got 'null:H200'"),
    (None, "executor must be torch, modeled:<profile>, emulated:<profile> or null; got None"),
    ("modeled:A100", "executor must be modeled:<profile> with a profile among ascend-910b,"),
])
def test_errors_name_the_kinds_and_profiles(text, words):
    with pytest.raises(ExecutorSpecError, match=words.replace("(", r"\(")):
        ExecutorSpec.parse(text)


def test_engine_config_reads_it():
    with pytest.raises(ValueError, match="executor must be modeled:<profile> with a profile"):
        EngineConfig(executor="modeled:A100")


def test_a_profile_yaml_path_is_a_profile(tmp_path):
    from engine.devices.profile import DEVICES_DIR
    path = tmp_path / "mine.yaml"
    path.write_text((DEVICES_DIR / "h200.yaml").read_text())
    assert ExecutorSpec.parse(f"modeled:{path}").device_profile().name


def test_every_kind_names_a_module_that_builds_it():
    import importlib
    for kind in KINDS.values():
        assert callable(importlib.import_module(f"engine.executors.{kind.module}").build)
