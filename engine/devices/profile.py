"""Device profiles: published device figures with their sources, one YAML per device.

Every figure carries `kind`: vendor (a vendor document), press (third parties), derived
(arithmetic on other figures), assumption (a roofline default of this harness, not a
measurement) or fitted (a step-model constant fitted to published deployments). A figure
nobody published is null, never guessed: asking for it raises.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Dict, Mapping, Optional, Tuple, Union

from fileio.regular import check_regular, not_regular
from fileio.yaml_lines import KeyPath, load_with_lines

DEVICES_DIR = Path(__file__).resolve().parent
KERNELS_DIR = DEVICES_DIR.parent / "kernels"  # the bundled kernel tables
# dense tensor-core rates; MX/NV block formats run at these; int8 is W8A8 (Ascend 910B/910C
# serve DeepSeek in INT8: they have no FP8)
PRECISIONS = ("bf16", "fp8", "fp4", "int8")
FIGURE_KINDS = ("vendor", "press", "derived")
# the step model's constants: a default (assumption) or fitted to published deployments
# (docs/modeling.md, "Efficiencies")
MODEL_KINDS = ("assumption", "fitted")
BACKENDS = ("cuda", "npu")
# A figure's plausible range, in its own unit: wide of every published device (a typo such
# as 1e300 GB of HBM, or an efficiency of 5, would model nothing real and overflow the
# step model); the step model's efficiencies are shares of a peak
FIGURE_RANGE = (1e-3, 1e7)
RANGES = {name: (1e-6, 1.0) for name in ("compute_efficiency", "memory_efficiency",
                                          "network_efficiency")}
RANGES["scaleup_devices"] = (1, 1 << 16)
RANGES["family_efficiency"] = (1e-6, 1.0)
WHOLE = ("scaleup_devices",)
# fields a file may leave out
OPTIONAL = ("source", "layer_floor_us", "idle_w", "host_memory_gb", "host_link_gb_s",
            "kernels", "family_efficiency")
# a roofline kernel table's efficiency per family (engine/kernels/roofline.py)
EFFICIENCY_FAMILIES = ("gemm", "decode_attention")


@dataclass(frozen=True)
class Figure:
    value: float
    kind: str  # vendor | press | derived | assumption
    source: str


@dataclass(frozen=True)
class KernelSet:
    """A software stack's kernel table for the device (docs/modeling.md, "Kernel tables"):
    the file (given relative to the profile's folder, or bundled under engine/kernels/), the
    families taken from it (empty: all), and where its figures come from."""
    table: Path
    families: Tuple[str, ...]
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
    # the least time one layer of a busy rank takes, whatever its work: kernel launches and
    # small kernels, a figure of the software stack (docs/modeling.md, "The latency
    # floor"); None: no floor. A file may leave it out.
    layer_floor_us: Optional[Figure] = None
    # what the device draws with nothing scheduled, the floor of modeled power
    # (docs/metrics.md, "Power and cost"); None: unknown. A file may leave it out.
    idle_w: Optional[Figure] = None
    # the host's memory per device, and one device's link to it (GB/s, one direction): the
    # host KV tier's room and reload rate (docs/scheduling.md, "Prefix caching"); None:
    # unpublished. A file may leave them out.
    host_memory_gb: Optional[Figure] = None
    host_link_gb_s: Optional[Figure] = None
    # stack name -> its kernel table (docs/modeling.md, "Kernel tables"), the first the
    # default; empty: every part a roofline. A file may leave it out.
    kernels: Mapping[str, KernelSet] = field(default_factory=dict)
    # where it has no kernel tables: each kernel a roofline at its family's efficiency
    # (EFFICIENCY_FAMILIES; engine/kernels/roofline.py); empty: one lumped roofline
    family_efficiency: Mapping[str, Figure] = field(default_factory=dict)
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

    def figure(self, name: str) -> float:
        """The value of an optional figure (hbm_gb, hbm_tb_s, interconnect_gb_s, tdp_w,
        idle_w, scaleout_gb_s, host_memory_gb, host_link_gb_s); raises if the figure is
        unpublished."""
        figure: Optional[Figure] = getattr(self, name)
        if figure is None:
            raise ValueError(f"{self.name}: no published {name}")
        return figure.value


def profile_record(profile: DeviceProfile) -> dict:
    """The profile as plain data, its fields in their declared order (the YAML files'): a
    figure as {value, kind, source}, an unpublished one None. A run's manifest records it
    (`device_profile`), so its report shows the figures the run used."""
    def plain(v):
        if isinstance(v, Figure):
            return dict(value=v.value, kind=v.kind, source=v.source)
        if isinstance(v, KernelSet):
            return dict(table=str(v.table), families=list(v.families), source=v.source)
        if isinstance(v, Mapping):
            return {k: plain(x) for k, x in v.items()}
        return v
    return {f.name: plain(getattr(profile, f.name)) for f in fields(profile)}


def known_profiles() -> list:
    return sorted(p.stem for p in DEVICES_DIR.glob("*.yaml"))


def profile_file_problem(name_or_path: Union[str, Path]) -> Optional[str]:
    """What is wrong with `name_or_path` as a profile file, where it is a path: ends in .yaml
    or .yml, or holds a path separator; None where it is a readable profile file's path or
    no path at all (a bundled name, known or not). "dev.yaml: is a FIFO (named pipe), not a
    regular file", "dev.yaml: no such file", "/etc/x: a profile file's name ends in .yaml".
    """
    text = str(name_or_path)
    suffix = Path(text).suffix in (".yaml", ".yml")
    if not suffix and os.sep not in text and "/" not in text:
        return None
    why = not_regular(text)
    if suffix:
        return None if why is None else f"{text}: {why}"
    return f"{text}: {why or 'a file'}; a profile file's name ends in .yaml or .yml"


def load_device_profile(name_or_path: Union[str, Path]) -> DeviceProfile:
    """A bundled profile by name ("H200", "Ascend 950PR", "ascend-950pr") or a YAML path.
    A malformed file is a ValueError naming the file, the line and the field."""
    path = Path(name_or_path)
    if path.suffix not in (".yaml", ".yml"):
        stem = str(name_or_path).strip().lower().replace(" ", "-").replace("_", "-")
        if stem not in known_profiles():  # a name, never a path into or out of DEVICES_DIR
            problem = profile_file_problem(name_or_path)
            raise ValueError(f"unknown device {name_or_path!r}"
                             f"{f' ({problem})' if problem else ''}; bundled devices: "
                             f"{', '.join(known_profiles())}")
        path = DEVICES_DIR / f"{stem}.yaml"
    stat = check_regular(path).stat()
    key = (str(path), stat.st_mtime_ns, stat.st_size)
    if key not in _PARSED:
        data, lines = load_with_lines(path)
        _PARSED[key] = _parse(path, data, _Where(path, lines))
    return _PARSED[key]


# Each file parsed once a process, while it is unchanged: a sweep resolves many workloads
# on a few profiles (a profile is frozen).
_PARSED: Dict[Tuple[str, int, int], DeviceProfile] = {}


class _Where:
    """Where a profile field stood: `file:line: field` for its messages."""

    def __init__(self, path: Path, lines: Mapping[KeyPath, int]) -> None:
        self.path, self.lines = path, lines

    def __call__(self, *key: str) -> str:
        line = next((self.lines[key[:i]] for i in range(len(key), 0, -1)
                     if key[:i] in self.lines), None)
        at = f"{self.path}:{line}" if line else str(self.path)
        return f"{at}: {'.'.join(key)}" if key else at


def _parse(path: Path, data, where: _Where) -> DeviceProfile:
    if not isinstance(data, dict):
        raise ValueError(f"{where()}: expected a mapping of device fields")
    names = [f.name for f in fields(DeviceProfile)]
    unknown = sorted(set(data) - set(names))
    missing = [n for n in names if n not in data and n not in OPTIONAL]
    if unknown:
        raise ValueError(f"{where(unknown[0])}: unknown field; expected one of "
                         f"{', '.join(names)}")
    if missing:
        raise ValueError(f"{where()}: missing field(s) {', '.join(missing)}")
    for name in ("name", "vendor", "chip"):
        if not isinstance(data[name], str) or not data[name].strip():
            raise ValueError(f"{where(name)}: expected a non-empty string, got "
                             f"{data[name]!r}")
    if data["backend"] not in BACKENDS:
        raise ValueError(f"{where('backend')}: expected one of {', '.join(BACKENDS)}, "
                         f"got {data['backend']!r}")
    peaks = data["peak_tflops"]
    if not isinstance(peaks, dict) or sorted(peaks) != sorted(PRECISIONS):
        raise ValueError(f"{where('peak_tflops')}: expected each of {', '.join(PRECISIONS)} "
                         f"(null where unpublished)")
    values = dict(data)
    values["peak_tflops"] = {p: _figure(where, ("peak_tflops", p), peaks[p], FIGURE_KINDS)
                             for p in PRECISIONS}
    for name in ("hbm_gb", "hbm_tb_s", "interconnect_gb_s", "tdp_w", "scaleout_gb_s"):
        values[name] = _figure(where, (name,), data[name], FIGURE_KINDS)
    values["scaleup_devices"] = _figure(where, ("scaleup_devices",), data["scaleup_devices"],
                                        FIGURE_KINDS, required=True)
    for name in ("step_overhead_us", "compute_efficiency", "memory_efficiency",
                 "scaleup_latency_us", "scaleout_latency_us", "network_efficiency"):
        values[name] = _figure(where, (name,), data[name], MODEL_KINDS, required=True)
    values["layer_floor_us"] = _figure(where, ("layer_floor_us",), data.get("layer_floor_us"),
                                       MODEL_KINDS)
    values["idle_w"] = _figure(where, ("idle_w",), data.get("idle_w"),
                               FIGURE_KINDS + MODEL_KINDS)
    if values["idle_w"] is not None and values["tdp_w"] is not None \
            and values["idle_w"].value > values["tdp_w"].value:
        raise ValueError(f"{where('idle_w', 'value')}: expected at most tdp_w "
                         f"({values['tdp_w'].value:g} W), got {values['idle_w'].value:g}")
    for name in ("host_memory_gb", "host_link_gb_s"):
        values[name] = _figure(where, (name,), data.get(name), FIGURE_KINDS)
    values["kernels"] = _kernel_sets(where, path.parent, data.get("kernels") or {})
    values["family_efficiency"] = _family_efficiency(where, data.get("family_efficiency") or {})
    values["source"] = str(data.get("source") or "")
    return DeviceProfile(**values)


def _family_efficiency(where: _Where, data) -> Dict[str, Figure]:
    if not isinstance(data, dict) or not set(data) <= set(EFFICIENCY_FAMILIES):
        raise ValueError(f"{where('family_efficiency')}: expected a mapping of "
                         f"{', '.join(EFFICIENCY_FAMILIES)} to {{value, kind, source}}")
    out: Dict[str, Figure] = {}
    for f in EFFICIENCY_FAMILIES:
        if f in data:
            figure = _figure(where, ("family_efficiency", f), data[f], MODEL_KINDS, required=True)
            assert figure is not None  # required: never None
            out[f] = figure
    return out


def _table_path(folder: Path, table: str) -> Optional[Path]:
    """A kernel table named relative to the profile's folder, else a bundled one (a copy
    of a bundled profile keeps its tables)."""
    for base in (folder, KERNELS_DIR):
        if not_regular(base / table) is None:
            return (base / table).resolve()
    return None


def _kernel_sets(where: _Where, folder: Path, data) -> Dict[str, KernelSet]:
    from ..kernels.table import FAMILIES

    if not isinstance(data, dict):
        raise ValueError(f"{where('kernels')}: expected a mapping of stack name to "
                         f"{{table, families, source}}")
    out = {}
    for stack, entry in data.items():
        key = ("kernels", str(stack))
        if not isinstance(entry, dict) or sorted(entry) != ["families", "source", "table"]:
            raise ValueError(f"{where(*key)}: expected {{table, families, source}}, got "
                             f"{entry!r}")
        table = entry["table"]
        path = _table_path(folder, table) if isinstance(table, str) else None
        if path is None:
            raise ValueError(f"{where(*key, 'table')}: expected a kernel table's path, "
                             f"relative to {folder} or a bundled one under {KERNELS_DIR}, "
                             f"got {table!r}")
        families = entry["families"] or []
        unknown = [f for f in families if f not in FAMILIES]
        if not isinstance(families, list) or unknown:
            raise ValueError(f"{where(*key, 'families')}: expected a list of "
                             f"{', '.join(FAMILIES)} (empty: all), got {families!r}")
        if not isinstance(entry["source"], str) or not entry["source"].strip():
            raise ValueError(f"{where(*key, 'source')}: expected a non-empty string")
        out[str(stack)] = KernelSet(path, tuple(families), entry["source"])
    return out


def _figure(where: _Where, key: KeyPath, data, kinds, required: bool = False) \
        -> Optional[Figure]:
    if data is None and not required:
        return None
    if not isinstance(data, dict) or sorted(data) != ["kind", "source", "value"]:
        raise ValueError(f"{where(*key)}: expected {{value, kind, source}}"
                         + ("" if required else " or null") + f", got {data!r}")
    if data["kind"] not in kinds:
        raise ValueError(f"{where(*key, 'kind')}: expected one of {', '.join(kinds)}, "
                         f"got {data['kind']!r}")
    value = data["value"]
    low, high = RANGES.get(key[0], FIGURE_RANGE)
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or not low <= value <= high \
            or (key[0] in WHOLE and value != int(value)):
        kind = "a whole number" if key[0] in WHOLE else "a number"
        raise ValueError(f"{where(*key, 'value')}: expected {kind} in {low:g}..{high:g}, got "
                         f"{value!r}")
    if not isinstance(data["source"], str) or not data["source"].strip():
        raise ValueError(f"{where(*key, 'source')}: expected a non-empty string naming the "
                         f"figure's source, got {data['source']!r}")
    return Figure(float(value), data["kind"], data["source"])
