"""detect_device with fake CUDA and Ascend runtimes: no accelerator needed."""

import sys
import types

import pytest
import torch

from engine.devices import DeviceInfo, detect_device


@pytest.fixture
def cuda(monkeypatch):
    def install(capability, name):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: capability)
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: name)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    return install


@pytest.fixture
def npu(monkeypatch):
    def install(name, available=True):
        fake = types.SimpleNamespace(npu=types.SimpleNamespace(
            is_available=lambda: available, get_device_name=lambda *a: name))
        monkeypatch.setitem(sys.modules, "torch_npu", fake)
    monkeypatch.setitem(sys.modules, "torch_npu", None)  # import fails: not installed
    return install


@pytest.mark.parametrize("capability, name, chip", [
    ((10, 0), "NVIDIA B200", "SM100"), ((10, 3), "NVIDIA B300", "SM100"),
    ((9, 0), "NVIDIA H200", "SM90"), ((8, 0), "NVIDIA A100-SXM4-80GB", "SM80"),
])
def test_cuda(cuda, npu, capability, name, chip):
    cuda(capability, name)
    for requested in ("auto", "cuda"):
        assert detect_device(requested) == DeviceInfo("cuda", name, chip, capability)


@pytest.mark.parametrize("name, chip", [
    ("Ascend950PR", "Ascend 950"), ("Ascend 950DT", "Ascend 950"),
    ("Ascend910B3", "Ascend 910B"), ("Ascend910_9392", "Ascend 910C"),
    ("Ascend310P", "Ascend310P"),
])
def test_npu(cuda, npu, name, chip):
    npu(name)
    for requested in ("auto", "npu"):
        info = detect_device(requested)
        assert (info.backend, info.name, info.chip, info.capability) == ("npu", name, chip, None)


def test_auto_prefers_cuda_and_leaves_torch_npu_alone(cuda, monkeypatch):
    class Untouchable(types.ModuleType):
        def __getattr__(self, attr):
            raise AssertionError("torch_npu was used")
    monkeypatch.setitem(sys.modules, "torch_npu", Untouchable("torch_npu"))
    cuda((10, 0), "NVIDIA B200")
    assert detect_device().backend == "cuda"
    assert detect_device("cpu").backend == "cpu"


def test_auto_falls_back_to_cpu(cuda, npu):
    assert detect_device().backend == "cpu"
    assert detect_device().torch_device == torch.device("cpu")
    npu("Ascend950PR", available=False)
    assert detect_device().backend == "cpu"


def test_absent_device_raises(cuda, npu):
    with pytest.raises(RuntimeError, match="'cuda' requested"):
        detect_device("cuda")
    with pytest.raises(RuntimeError, match="requires torch_npu"):
        detect_device("npu")
    npu("Ascend950PR", available=False)
    with pytest.raises(RuntimeError, match="'npu' requested"):
        detect_device("npu")
    with pytest.raises(ValueError, match="device must be one of"):
        detect_device("tpu")
