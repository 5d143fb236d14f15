"""Which device this process runs on: CUDA (SM90, SM100), Ascend NPU (910B, 910C, 950;
torch_npu) or CPU.

torch is imported on call; torch_npu only when npu is requested, or under "auto" when no
CUDA device is available (importing it registers the NPU backend with torch).
"""

from __future__ import annotations

import importlib
import platform
from dataclasses import dataclass
from typing import Optional, Tuple

REQUESTS = ("auto", "cpu", "cuda", "npu")


@dataclass(frozen=True)
class DeviceInfo:
    backend: str  # cpu | cuda | npu
    name: str  # as the runtime reports it
    chip: str  # SM90, SM100, Ascend 910B, Ascend 910C, Ascend 950, or the CPU's machine
    capability: Optional[Tuple[int, int]] = None  # CUDA compute capability

    @property
    def torch_device(self):
        """The torch.device of this backend's current device (npu needs torch_npu loaded)."""
        import torch
        return torch.device(self.backend)


def sm_label(capability: Tuple[int, int]) -> str:
    """SM90 for 9.0; every 10.x (B200, GB200, B300) is the SM100 family."""
    major, minor = capability
    return "SM100" if major == 10 else f"SM{major}{minor}"


def ascend_chip(name: str) -> str:
    """The Ascend generation in a device name (Ascend910B3, Ascend910_9392, Ascend950PR)."""
    upper = name.upper().replace(" ", "")
    if "950" in upper:
        return "Ascend 950"
    if "910_93" in upper or "910C" in upper:  # the 910C family is SoC 910_93xx ("A3")
        return "Ascend 910C"
    if "910B" in upper:
        return "Ascend 910B"
    return name


def detect_device(requested: str = "auto") -> DeviceInfo:
    """The device for `requested`: auto picks cuda, then npu, then cpu; asking for cuda or
    npu when it is absent raises."""
    if requested not in REQUESTS:
        raise ValueError(f"device must be one of {', '.join(REQUESTS)}, got {requested!r}")
    if requested == "cpu":
        return _cpu()
    if requested in ("auto", "cuda"):
        torch = _import("torch", required=requested == "cuda")
        if torch is not None and torch.cuda.is_available():
            capability = tuple(torch.cuda.get_device_capability())
            return DeviceInfo("cuda", torch.cuda.get_device_name(), sm_label(capability),
                              capability)
        if requested == "cuda":
            raise RuntimeError("device 'cuda' requested but torch.cuda.is_available() is "
                               "False (no CUDA device, or a CPU-only torch build)")
    torch_npu = _import("torch_npu", required=requested == "npu")
    if torch_npu is not None and torch_npu.npu.is_available():
        name = torch_npu.npu.get_device_name()
        return DeviceInfo("npu", name, ascend_chip(name))
    if requested == "npu":
        raise RuntimeError("device 'npu' requested but torch_npu.npu.is_available() is False")
    return _cpu()


def _cpu() -> DeviceInfo:
    machine = platform.machine() or "cpu"
    return DeviceInfo("cpu", platform.processor() or machine, machine)


def _import(module: str, required: bool):
    try:
        return importlib.import_module(module)
    except ImportError as e:
        if required:
            raise RuntimeError(f"device requires {module}, which cannot be imported: {e}") \
                from None
        return None
