"""The device table over time: utilisation, memory and power where a source reports them,
and the host's and the harness process's CPU."""

from __future__ import annotations

from typing import Dict

import numpy as np

from ..timeline import binned
from .canvas import done, drawable, figure

PANELS = (("util_pct", "device utilisation (%)", 1.0),
          ("mem_used_bytes", "device memory used (GB)", 1e-9),
          ("power_w", "board power (W)", 1.0),
          ("cpu", "CPU (%)", 1.0))
NAMES = ["t_s", "device", "util_pct", "mem_used_bytes", "power_w", "process_cpu_pct",
         "host_cpu_pct"]


def _series(run):
    """{panel: [(label, t, values)]} of the run's device table, devices apart. A modeled
    run's devices are the step model's: its table's readings are the host's (its CPU),
    never the modeled devices'."""
    c = run.columns("device", NAMES)
    out: Dict[str, list] = {}
    for dev in [] if run.modeled else np.unique(c["device"]):
        rows = c["device"] == dev
        for name, _, scale in PANELS[:3]:
            v = c[name][rows].astype(np.float64)
            if np.isfinite(v).any():
                out.setdefault(name, []).append((f"device {int(dev)}", c["t_s"][rows],
                                                 v * scale))
    rows = c["device"] == -1
    for name, label in (("process_cpu_pct", "harness process, % of one core"),
                        ("host_cpu_pct", "host, % of all cores")):
        v = c[name][rows].astype(np.float64)
        if np.isfinite(v).any():
            out.setdefault("cpu", []).append((label, c["t_s"][rows], v))
    return out


def draw(arms):
    runs = [(arm, i, _series(run)) for arm in arms for i, run in enumerate(arm.runs)
            if run.has("device")]
    shown = [p for p in PANELS if any(p[0] in s for _, _, s in runs)]
    if not shown:
        return None
    measured = any(not run.modeled for arm in arms for run in arm.runs if run.has("device"))
    fig, axes = figure(ncols=len(shown), width=min(3.6 * len(shown) + 0.5, 12.0), height=2.9)
    styles = ("-", "--", ":", "-.")
    for ax, (name, title, _) in zip(axes[0], shown):
        for arm, i, series in runs:
            for j, (label, t, v) in enumerate(series.get(name, ())):
                tb, vb = binned(t, {"v": v})
                one = len(arms) == 1
                ax.plot(drawable(tb), drawable(vb["v"]), styles[j % len(styles)], alpha=0.85,
                        color=f"C{j}" if one else arm.colour,
                        label=label if one else (f"{label}, {arm.label}" if i == 0 else None))
        ax.set(title=title if measured else "the harness host's CPU (%)",
               xlabel="time (s)" if measured else "host wall-clock time (s)")
        ax.set_ylim(bottom=0)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="best")
    if not measured:
        return done(fig, "device", "The harness host's CPU: the devices are modeled",
                    "The devices are modeled (the step model on the virtual clock): there is "
                    "no utilisation, memory or power of theirs to read. This is the CPU of the "
                    "host that ran the harness, from the device table (docs/telemetry.md), on "
                    "the host's wall clock, not the virtual clock. Averaged into at most 1,500 "
                    "time bins.", badge="host")
    return done(fig, "device", "Device utilisation, memory, power and CPU",
                "The device table's readings (docs/telemetry.md); a panel appears only where "
                "a source reported the value" + ("; a modeled run's only the host's CPU" if any(
                    run.modeled for arm in arms for run in arm.runs) else "")
                + ". Averaged into at most 1,500 time bins.")
