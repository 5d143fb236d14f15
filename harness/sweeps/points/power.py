"""A run's power per device (docs/metrics.md, "Power and cost"): measured, from NVML's
energy counter over the measured window, where the run recorded it; else, for a modeled
run, modeled from its device profile's `idle_w` and `tdp_w` and the share of the measured
window its devices were busy stepping."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, Optional

import numpy as np

from engine.devices.profile import load_device_profile

from ...record.run import POOLS, Run

MEASURED, MODELED = "measured", "modeled"


@dataclass(frozen=True)
class Power:
    watts: float  # per device, the mean over the measured window; NaN when unknown
    source: str  # MEASURED, MODELED, or "" when unknown
    busy: float = math.nan  # modeled: the devices' busy share of the window, 0..1


UNKNOWN = Power(math.nan, "")


def run_power(run: Run) -> Power:
    """The run's power per device: measured where its summary holds the accelerators'
    energy, modeled for a modeled run whose profiles give both `tdp_w` and `idle_w`, else
    UNKNOWN."""
    per_token = run.value("energy_per_output_token.value")  # J/token over the window
    tokens_per_s = run.value("throughput.output_tokens")
    if math.isfinite(per_token) and math.isfinite(tokens_per_s) and per_token > 0:
        return Power(per_token * tokens_per_s / run.devices, MEASURED)  # J/s = W
    return _modeled(run) if run.modeled else UNKNOWN


def _modeled(run: Run) -> Power:
    """Each pool's devices at idle_w + (tdp_w - idle_w) x busy, busy the pool's instances'
    mean share of the window spent in a step; summed over the pools, per device."""
    pools = _pools(run)
    busy = busy_shares(run.table("steps", ["role", "instance", "step", "warmup",
                                           "t_start_s", "t_end_s"]))
    watts, devices, busy_devices = 0.0, 0, 0.0
    for role, (count, profile) in pools.items():
        share = busy.get(role, math.nan)
        tdp, idle = (_watts(profile, "tdp_w"), _watts(profile, "idle_w"))
        watts += count * (idle + (tdp - idle) * share)
        devices += count
        busy_devices += count * share
    if not math.isfinite(watts) or devices == 0:
        return Power(math.nan, "", busy_devices / devices if devices else math.nan)
    return Power(watts / devices, MODELED, busy_devices / devices)


def busy_shares(steps) -> Dict[str, float]:
    """Per pool (the steps table's `role`), its instances' mean busy share: the time in
    measured steps (each step once, however many DP ranks it has rows for) over the
    window, the first measured step's start to the last one's end over every instance."""
    steps = steps[~steps["warmup"].to_numpy(bool)].drop_duplicates(["role", "instance",
                                                                     "step"])
    if not len(steps):
        return {}
    window = float(steps["t_end_s"].max() - steps["t_start_s"].min())
    if not window > 0:
        return {}
    busy = (steps["t_end_s"] - steps["t_start_s"]).groupby(
        [steps["role"].astype(str), steps["instance"]], observed=True).sum() / window
    return {str(role): float(np.clip(part.mean(), 0.0, 1.0))
            for role, part in busy.groupby(level=0)}


def _pools(run: Run) -> Dict[str, tuple]:
    """Per pool (steps table role): its devices and their profile (None: not known)."""
    keys = run.keys
    if not run.disaggregated:
        return {"colocated": (run.devices, _profile(run, None))}
    return {role: (int(keys[f"deployment.{role}.instances"])
                   * int(keys[f"deployment.{role}.devices"]), _profile(run, role))
            for role in POOLS}


def _profile(run: Run, role: Optional[str]) -> Optional[dict]:
    """The pool's profile as the manifest records one (`device_profile`: the run's
    device's); a pool on another device gets its bundled profile's."""
    record = run.manifest.device_profile
    name = run.pool_device(role)
    if isinstance(record, dict) and record.get("name") == name:
        return record
    try:
        profile = load_device_profile(name)
    except ValueError:
        return None
    return {f: None if getattr(profile, f) is None else dict(value=getattr(profile, f).value)
            for f in ("tdp_w", "idle_w")}


def _watts(profile: Optional[dict], field: str) -> float:
    figure = (profile or {}).get(field)
    return float(figure["value"]) if isinstance(figure, dict) else math.nan
