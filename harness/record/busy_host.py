"""Whether a busy host moved a run's figures, and which: the run's manifest flags it
`contaminated` (harness/run/host_share.py: other processes' CPU and steal time above
the workload's `gil_contamination_pct`), and the figures it may have moved are the
host-timed ones (harness/schema/summary.py `host_timed`; docs/metrics.md, "Host-timed
figures"). `show`, `run`, `gil`, `compare` and `report` all judge a run by this."""

from __future__ import annotations

import math
from typing import Iterable, Optional, Tuple

from ..schema.manifest import Manifest
from ..schema.summary import host_timed


def busy_host(manifest: Manifest, rows: Iterable[Tuple[str, str, float]]) -> Optional[dict]:
    """{other_cpu_pct, steal_pct, threshold_pct, modeled, host_timed}: the manifest's host
    share and the host-timed metrics among the summary `rows` (metric, stat, value) that
    hold a figure (a NaN or a count of samples is none), in their order, when the run was
    contaminated and any is host-timed; None otherwise (also for a run that did not record
    its host share)."""
    share = manifest.host_share
    if not isinstance(share, dict) or share.get("contaminated") is not True:
        return None
    modeled = bool(manifest.modeled)
    timed = list(dict.fromkeys(str(metric) for metric, stat, value in rows
                               if stat != "count" and not math.isnan(value)
                               and host_timed(str(metric), modeled)))
    if not timed:
        return None
    return dict(other_cpu_pct=_number(share.get("other_cpu_pct")),
                steal_pct=_number(share.get("steal_pct")),
                threshold_pct=_number(share.get("threshold_pct")), modeled=modeled,
                host_timed=timed)


def others_share(busy: dict) -> float:
    """Other processes' CPU and steal time together, as a share (0..1) of the host's."""
    return (busy["other_cpu_pct"] + busy["steal_pct"]) / 100


def note(busy: dict) -> str:
    """The busy host in one line, naming the figures it may have moved."""
    what = ("its host timings (" + ", ".join(busy["host_timed"]) + "); the modeled figures "
            "come from the virtual clock and are not affected") if busy["modeled"] else \
        "every latency, throughput and step time of this measured run (timed on that host)"
    return (f"busy host: other processes and steal time held {others_share(busy):.0%} of the "
            f"host's CPU during the run (above gil_contamination_pct, "
            f"{busy['threshold_pct']:g}%): this may have inflated {what}")


def _number(value) -> float:
    return float(value) if isinstance(value, (int, float)) else float("nan")
