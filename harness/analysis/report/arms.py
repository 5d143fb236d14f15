"""Runs grouped into arms: runs whose settings agree form one arm; the settings that differ
between arms name them (the GIL mode, the device, the deployment, then any workload key)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Sequence, Tuple

from ...schema.values import GIL_ARMS
from .run_data import RunData

# Workload keys that differ between repeats of one setting, not between settings.
_SAME_SETTING = {"gil", "output", "repeats"}


@dataclass
class Arm:
    label: str
    colour: str
    runs: List[RunData]
    settings: Dict[str, str]  # the differing keys' values in this arm


PALETTE = ("#1f6fb2", "#e4572e", "#2a9d5c", "#8e5ec4", "#d4a017", "#17a2b8", "#7f7f7f")


LABELS = ("gil_mode", "device", "deployment")  # settings that name an arm by their value


def settings(run: RunData) -> Dict[str, str]:
    """The run's settings that can tell arms apart: its GIL mode, device and deployment
    ("2P1D", "co-located": Run.deployment), then its workload keys (`engine.overlap`)."""
    flat = {"gil_mode": run.gil_mode, "device": run.device, "deployment": run.run.deployment}
    flat.update((k, str(v)) for k, v in run.run.keys.items()
                if k not in _SAME_SETTING and k not in flat)
    return flat


def differing(runs: Sequence[RunData]) -> List[str]:
    """The settings whose values are not the same in every run, the run labels first."""
    every = [settings(r) for r in runs]
    keys = dict.fromkeys(k for s in every for k in s)
    return [k for k in keys if len({s.get(k) for s in every}) > 1]


def group(runs: Sequence[RunData]) -> Tuple[List[Arm], List[str]]:
    """(arms in the order their first run was given, the keys that differ between them).
    An arm is named by the run labels that differ (GIL mode, device, deployment) where they
    tell the arms apart, the keys a deployment derives from them (pool size, DP degree) left to the
    list of what differs; otherwise by every differing key."""
    keys = differing(runs)
    arms: Dict[tuple, Arm] = {}
    for run in runs:
        s = settings(run)
        values = tuple(s.get(k, "") for k in keys)
        if values not in arms:
            arms[values] = Arm("", PALETTE[len(arms) % len(PALETTE)], [],
                               dict(zip(keys, values)))
        arms[values].runs.append(run)
    labels = [k for k in keys if k in LABELS]
    if len({tuple(a.settings[k] for k in labels) for a in arms.values()}) < len(arms):
        labels = keys
    for arm in arms.values():
        arm.label = ", ".join(arm.settings[k] if k in LABELS
                              else f"{k.split('.')[-1]} {arm.settings[k]}"
                              for k in labels) or _one_label(runs)
    return list(arms.values()), keys


def _one_label(runs: Sequence[RunData]) -> str:
    return runs[0].name if len(runs) == 1 else runs[0].run.values.get("name", "runs")


def in_gil_order(arms: List[Arm]) -> List[Arm]:
    """Arms that differ by GIL mode in a GIL sweep's order of arms (harness/schema/values.py GIL_ARMS: the
    released arm first, as `steptrace gil` compares each arm against it), coloured in that
    order; arms of one mode keep theirs."""
    order = {mode: i for i, mode in enumerate(GIL_ARMS)}
    out = sorted(arms, key=lambda a: order.get(a.settings.get("gil_mode", ""), len(order)))
    for i, arm in enumerate(out):
        arm.colour = PALETTE[i % len(PALETTE)]
    return out
