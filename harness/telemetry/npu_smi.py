"""Ascend NPUs through npu-smi: `npu-smi info -t usages -i N` and `-t memory -i N`.

Both print "Key : Value" lines. Field names vary across products and CANN versions, and
so does the place of "Chip ID": before a chip's fields, after them, or absent where a
card has one chip; values may read "NA". The parser goes through ALIASES (our field ->
npu-smi's names for it, preferred first); names in neither ALIASES nor IGNORED are
reported in the notes so the table can grow. Fixtures: tests/fixtures/npu_smi/.

npu-smi does not say over what window its usage rates are averaged: util_window_s stays
null. Memory used is a whole percentage of the capacity: its resolution is 1% of it.
"""

import functools
import os
import shutil
import subprocess
from typing import Dict, List, Set

from harness.telemetry.columns import row

MIN_PERIOD_S = 1.0   # npu-smi is a management tool, not a profiler: poll at <= 1 Hz
TIMEOUT_S = 5.0
MIB = 1 << 20        # npu-smi's "MB" are MiB: a 64 GiB HBM reads 65536

ALIASES = {
    "util_pct": ("NPU Utilization(%)",),
    "aicore_pct": ("Aicore Usage Rate(%)",),
    "mem_used_pct": ("HBM Usage Rate(%)", "Memory Usage Rate(%)"),
    "mem_capacity_mib": ("HBM Capacity(MB)", "Memory Capacity(MB)", "Capacity(MB)"),
    "mem_bw_util_pct": ("HBM Bandwidth Usage Rate(%)", "Memory Bandwidth Usage Rate(%)"),
    "mem_clock_mhz": ("HBM Clock Speed(MHz)", "Clock Speed(MHz)"),
}
# Printed by the documented versions and deliberately not sampled: host-side DDR (where
# the NPU has HBM), CPUs, huge pages, vector/cube split, media engines, identities.
IGNORED = frozenset({
    "Chip Name", "DDR Capacity(MB)", "DDR Usage Rate(%)", "DDR Hugepages Total(page)",
    "DDR Hugepages Usage Rate(%)", "DDR Bandwidth Usage Rate(%)", "DDR Clock Speed(MHz)",
    "Hugepages Total(page)", "Hugepages Usage Rate(%)", "Total Capacity(MB)",
    "Aicpu Usage Rate(%)", "Ctrlcpu Usage Rate(%)", "Aivector Usage Rate(%)",
    "Aicube Usage Rate(%)", "Vectorcore Usage Rate(%)", "DVPP VDEC Usage Rate(%)",
    "DVPP VPC Usage Rate(%)", "DVPP VENC Usage Rate(%)", "DVPP JPEGE Usage Rate(%)",
    "DVPP JPEGD Usage Rate(%)", "HBM Temperature(C)", "HBM Manufacturer ID",
})
CARD_FIELDS = ("NPU ID", "Chip Count")  # per card, not per chip
KNOWN = frozenset(name for names in ALIASES.values() for name in names) | IGNORED


class NpuSmiError(Exception):
    pass


def parse(text: str) -> list:
    """The chips of one npu-smi output, each a dict of field name -> raw value, in order."""
    chips: List[Dict[str, str]] = []
    current: Dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if not sep or key in CARD_FIELDS:
            continue
        if key == "Chip ID" and current and "Chip ID" not in current:
            current["Chip ID"] = value  # printed after the chip's fields: closes it
            chips.append(current)
            current = {}
        elif key == "Chip ID":
            if current:
                chips.append(current)
            current = {"Chip ID": value}  # printed before the chip's fields: opens it
        else:
            current[key] = value
    if current:
        chips.append(current)
    return chips


def fields(chip: dict) -> tuple:
    """(our field -> number or None, the names neither aliased nor ignored)."""
    values = {}
    for name, aliases in ALIASES.items():
        raw = next((chip[alias] for alias in aliases if alias in chip), None)
        values[name] = _number(raw)
    unknown = sorted(set(chip) - KNOWN - {"Chip ID"})
    return values, unknown


def _number(raw):
    try:
        return float(raw)
    except (TypeError, ValueError):  # absent, or "NA" where the product cannot tell
        return None


def run_npu_smi(exe: str, query: str, npu: int) -> str:
    command = [exe, "info", "-t", query, "-i", str(npu)]
    shown = " ".join(["npu-smi"] + command[1:])
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S,
                              check=False)
    except subprocess.TimeoutExpired:
        raise NpuSmiError(f"`{shown}` timed out after {TIMEOUT_S:g} s") from None
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()
        raise NpuSmiError(f"`{shown}` exited with {done.returncode}: "
                          f"{lines[-1] if lines else 'no output'}")
    return done.stdout


def npu_id(device: int, env) -> int:
    """The npu-smi NPU ID of the engine's NPU device: ASCEND_RT_VISIBLE_DEVICES renumbers
    devices for the runtime, npu-smi ignores it."""
    visible = env.get("ASCEND_RT_VISIBLE_DEVICES")
    if visible is None:
        return device
    entries = [int(e) for e in visible.split(",") if e.strip()]
    if not 0 <= device < len(entries):
        raise ValueError(f"NPU device {device} is not in ASCEND_RT_VISIBLE_DEVICES={visible!r}")
    return entries[device]


class NpuSmiSource:
    name = "npu-smi"

    def __init__(self, devices, period_s: float, clock, run=None, env=os.environ):
        self.period_s = max(period_s, MIN_PERIOD_S)
        self._clock = clock
        self._npus = {}
        self._unknown: Set[str] = set()
        if run is None:
            exe = shutil.which("npu-smi")
            if exe is None:
                self.notes = {"npu-smi": "unavailable: npu-smi not found on PATH"}
                return
            run = functools.partial(run_npu_smi, exe)
        self._run = run
        self.notes = {"npu-smi": f"usages and memory every {self.period_s:g} s"}
        for device in devices:
            try:
                self._npus[device] = npu_id(device, env)
            except ValueError as e:
                self.notes[f"npu-smi.npu{device}"] = f"not sampled: {e}"

    def sample(self) -> list:
        return [self._read(device, npu) for device, npu in self._npus.items()]

    def _read(self, device, npu):
        t = self._clock()
        key = f"npu-smi.npu{device}"
        try:
            usages, memory = parse(self._run("usages", npu)), parse(self._run("memory", npu))
        except NpuSmiError as e:
            self.notes[key] = f"t={t:.3f} s: {e}"
            return row(t, "npu-smi", device)
        if len(usages) > 1:
            self.notes[key] = (f"NPU {npu} has {len(usages)} chips; the first "
                               f"(Chip ID {usages[0].get('Chip ID', '?')}) is sampled")
        used, unknown_u = fields(usages[0] if usages else {})
        known, unknown_m = fields(memory[0] if memory else {})
        self._note_unknown(unknown_u + unknown_m)
        values = {k: known[k] if v is None else v for k, v in used.items()}
        capacity = values["mem_capacity_mib"]
        return row(t, "npu-smi", device,
                   util_pct=values["util_pct"], aicore_pct=values["aicore_pct"],
                   mem_bw_util_pct=values["mem_bw_util_pct"],
                   mem_clock_mhz=values["mem_clock_mhz"],
                   mem_total_bytes=None if capacity is None else capacity * MIB,
                   mem_used_bytes=(None if capacity is None or values["mem_used_pct"] is None
                                   else round(values["mem_used_pct"] / 100 * capacity * MIB)))

    def _note_unknown(self, names):
        if set(names) - self._unknown:
            self._unknown.update(names)
            self.notes["npu-smi.fields"] = "not recognised, ignored: " + ", ".join(
                sorted(self._unknown))

    def close(self):
        pass
