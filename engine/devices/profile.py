"""Device profiles: published device figures with their sources, one YAML per device.

Every figure carries `kind`: vendor (a vendor document), press (third parties), derived
(arithmetic on other figures), assumption (a roofline default of this harness, not a
measurement) or fitted (a step-model constant fitted to published deployments). A figure
nobody published is null, never guessed: asking for it raises.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Mapping, Optional, Union

import yaml

DEVICES_DIR = Path(__file__).resolve().parent
# dense tensor-core rates; MX/NV block formats run at these; int8 is W8A8 (Ascend 910B/910C
# serve DeepSeek in INT8: they have no FP8)
PRECISIONS = ("bf16", "fp8", "fp4", "int8")
FIGURE_KINDS = ("vendor", "press", "derived")
# the step model's constants: a default (assumption) or fitted to published deployments
# (docs/modeling.md, "Efficiencies")
MODEL_KINDS = ("assumption", "fitted")
BACKENDS = ("cuda", "npu")


@dataclass(frozen=True)
class Figure:
    value: float
    kind: str  # vendor | press | derived | assumption
    source: str


@dataclass(frozen=True)
class DeviceProfile:
    name: str
    vendor: str
    backend: str  # cuda | npu: what detect_device reports for it
    chip: str  # detect_device's chip label (SM90, SM100, Ascend 950, ...)
    peak_tflops: Mapping[str, Optional[Figure]]  # precision -> dense TFLOP/s per chip
    hbm_gb: Optional[Figure]
    hbm_tb_s: Optional[Figure]
    interconnect_gb_s: Optional[Figure]  # scale-up, per chip, both directions summed
    tdp_w: Optional[Figure]
    scaleup_devices: Figure  # devices in one scale-up domain (NVLink, UB)
    scaleout_gb_s: Optional[Figure]  # per device, one direction, across scale-up domains
    # all-to-all defaults (kind: assumption): seconds = latency + bytes / (bw * network_efficiency)
    scaleup_latency_us: Figure
    scaleout_latency_us: Figure
    network_efficiency: Figure
    # roofline defaults (kind: assumption): step time =
    # step_overhead_us + max(flops / (peak * compute_efficiency), bytes / (bw * memory_efficiency))
    step_overhead_us: Figure
    compute_efficiency: Figure
    memory_efficiency: Figure
    source: str = ""

    def published(self) -> list:
        """The precisions with a published dense peak."""
        return [p for p in PRECISIONS if self.peak_tflops[p] is not None]

    def peak(self, precision: str) -> float:
        """Dense peak TFLOP/s at `precision`; raises if the figure is unpublished."""
        if precision not in self.peak_tflops:
            raise ValueError(f"unknown precision {precision!r}; known: {', '.join(PRECISIONS)}")
        figure = self.peak_tflops[precision]
        if figure is None:
            raise ValueError(f"{self.name}: no published dense {precision} peak; published "
                             f"precisions: {', '.join(self.published()) or 'none'}")
        return figure.value


def known_devices() -> list:
    return sorted(p.stem for p in DEVICES_DIR.glob("*.yaml"))


def load_device_profile(name_or_path: Union[str, Path]) -> DeviceProfile:
    """A bundled profile by name ("H200", "Ascend 950PR", "ascend-950pr") or a YAML path."""
    path = Path(name_or_path)
    if path.suffix not in (".yaml", ".yml"):
        stem = str(name_or_path).strip().lower().replace(" ", "-").replace("_", "-")
        path = DEVICES_DIR / f"{stem}.yaml"
        if not path.is_file():
            raise ValueError(f"unknown device {name_or_path!r}; bundled devices: "
                             f"{', '.join(known_devices())}")
    with open(path) as f:
        data = yaml.safe_load(f)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping of device fields")
    return _parse(path, data)


def _parse(path: Path, data: dict) -> DeviceProfile:
    names = [f.name for f in fields(DeviceProfile)]
    unknown = sorted(set(data) - set(names))
    missing = [n for n in names if n not in data and n != "source"]
    if unknown or missing:
        raise ValueError(f"{path}: unknown field(s) {unknown or 'none'}; "
                         f"missing field(s) {missing or 'none'}")
    if data["backend"] not in BACKENDS:
        raise ValueError(f"{path}: backend must be one of {', '.join(BACKENDS)}, "
                         f"got {data['backend']!r}")
    peaks = data["peak_tflops"]
    if not isinstance(peaks, dict) or sorted(peaks) != sorted(PRECISIONS):
        raise ValueError(f"{path}: peak_tflops must give each of {', '.join(PRECISIONS)} "
                         f"(null where unpublished)")
    values = dict(data)
    values["peak_tflops"] = {p: _figure(path, f"peak_tflops.{p}", peaks[p], FIGURE_KINDS)
                             for p in PRECISIONS}
    for name in ("hbm_gb", "hbm_tb_s", "interconnect_gb_s", "tdp_w", "scaleout_gb_s"):
        values[name] = _figure(path, name, data[name], FIGURE_KINDS)
    values["scaleup_devices"] = _figure(path, "scaleup_devices", data["scaleup_devices"],
                                        FIGURE_KINDS, required=True)
    for name in ("step_overhead_us", "compute_efficiency", "memory_efficiency",
                 "scaleup_latency_us", "scaleout_latency_us", "network_efficiency"):
        values[name] = _figure(path, name, data[name], MODEL_KINDS, required=True)
    return DeviceProfile(**values)


def _figure(path: Path, name: str, data, kinds, required: bool = False) -> Optional[Figure]:
    if data is None and not required:
        return None
    if not isinstance(data, dict) or sorted(data) != ["kind", "source", "value"]:
        raise ValueError(f"{path}: {name} must be {{value, kind, source}}"
                         + ("" if required else " or null"))
    if data["kind"] not in kinds:
        raise ValueError(f"{path}: {name}.kind must be one of {', '.join(kinds)}, "
                         f"got {data['kind']!r}")
    value = data["value"]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ValueError(f"{path}: {name}.value must be a positive number, got {value!r}")
    if not str(data["source"]).strip():
        raise ValueError(f"{path}: {name}.source is empty")
    return Figure(float(value), data["kind"], str(data["source"]))
