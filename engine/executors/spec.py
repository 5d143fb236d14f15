"""Which executor runs the plans, written `kind` or `kind:<profile>` (torch, null,
modeled:H200, emulated:H200), parsed here once. Adding a kind is one entry in KINDS and a
module in engine/executors/ with build(config, spec, model_config) -> Built."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, Optional

from ..devices.profile import (
    DeviceProfile,
    known_profiles,
    load_device_profile,
    profile_file_problem,
)

if TYPE_CHECKING:
    from ..devices.detect import DeviceInfo
    from ..flops import FlopsEstimator
    from ..kv_pool import KVPool
    from .base import Executor


@dataclass(frozen=True)
class ExecutorKind:
    name: str
    module: str  # engine.executors.<module>, imported only when an executor is built
    profile: bool  # written kind:<device profile>
    modeled: bool  # step durations come from a device model: no real clock to replay on
    doc: str


KINDS = {k.name: k for k in (
    ExecutorKind("torch", "torch_executor", False, False, "a real forward, one Worker per DP rank"),
    ExecutorKind("modeled", "modeled", True, True,
                 "a roofline of each step's FLOPs and bytes on a device profile"),
    ExecutorKind("emulated", "emulated", True, False,
                 "the host's real work per step (packing, a launch cost per layer), the "
                 "device's roofline waited for with the GIL released"),
    ExecutorKind("null", "null", False, False, "nothing: the harness's own cost"),
)}


class Built(NamedTuple):
    executor: Executor
    flops: FlopsEstimator  # at the bytes the run moves
    device: DeviceInfo  # the device the run executes on (the host for a device model)
    profile: Optional[DeviceProfile] = None  # the steps are timed on it, where one is known
    kv_pool: Optional[KVPool] = None  # how the executor sized the ranks' pools, if it did


class ExecutorSpecError(ValueError):
    def __init__(self, key: str, text: object, expected: str) -> None:
        super().__init__(f"{key} must be {expected}; got {text!r}")
        self.expected = expected  # the phrase alone, for errors worded "expected ..."


def written_forms() -> str:
    forms = [f"{k.name}:<profile>" if k.profile else k.name for k in KINDS.values()]
    return ", ".join(forms[:-1]) + " or " + forms[-1]


@dataclass(frozen=True)
class ExecutorSpec:
    kind: str
    profile: Optional[str] = None  # a bundled device profile's name, or a profile YAML path

    @classmethod
    def parse(cls, text: object, key: str = "executor") -> ExecutorSpec:
        """`torch`, `null`, `modeled:H200`; ExecutorSpecError names `key` and what is allowed."""
        kind, sep, profile = text.partition(":") if isinstance(text, str) else ("", "", "")
        entry = KINDS.get(kind)
        if entry is None or entry.profile != bool(sep):
            raise ExecutorSpecError(key, text, written_forms())
        if entry.profile and not _is_profile(profile):
            problem = profile_file_problem(profile)  # a path: what it is instead
            raise ExecutorSpecError(key, text, f"{kind}:<profile> with a profile among "
                                               f"{', '.join(known_profiles())} (or a YAML path)"
                                               f"{f'; {problem}' if problem else ''}")
        return cls(kind, profile or None)

    def __str__(self) -> str:
        return f"{self.kind}:{self.profile}" if self.profile else self.kind

    @property
    def modeled(self) -> bool:
        return KINDS[self.kind].modeled

    def device_profile(self) -> DeviceProfile:
        """The DeviceProfile named after the colon (ValueError for a kind without one)."""
        if self.profile is None:
            raise ValueError(f"the {self.kind} executor has no device profile")
        return load_device_profile(self.profile)

    def build(self, config, model_config) -> Built:
        module = importlib.import_module(f"{__package__}.{KINDS[self.kind].module}")
        return module.build(config, self, model_config)


def _is_profile(name: str) -> bool:
    if Path(name).suffix in (".yaml", ".yml"):
        return Path(name).is_file()
    return name.strip().lower().replace(" ", "-").replace("_", "-") in known_profiles()
