"""The gate's rules file: which summary metrics may move how far from the baseline.

    ttft.p99: {max_increase: 5%}
    throughput.output_tokens: {max_decrease: 3%}

A key is a summary metric as `steptrace compare` names it (metric.stat); a threshold is a
percentage ("5%") or a fraction (0.05), a decrease's below 100 %. Every error names the
file, the line and the key.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, List, Optional

from fileio.regular import NotAFile, check_regular
from fileio.yaml_lines import YamlError, load_with_lines

from ..errors import BadInput
from .compare import NEGLIGIBLE

KINDS = ("max_increase", "max_decrease")
PERCENT = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*%\s*$")


@dataclass(frozen=True)
class Rule:
    """metric may rise (max_increase) or fall (max_decrease) by at most `limit` (a
    fraction: 0.05 is 5 %)."""

    metric: str
    kind: str
    limit: float

    def __str__(self) -> str:
        return f"{self.kind} {self.limit * 100:g}%"

    def broken_by(self, ratio: float) -> bool:
        """Candidate / baseline `ratio` goes beyond the limit."""
        return ratio > 1 + self.limit if self.kind == "max_increase" else ratio < 1 - self.limit

    def moved(self, verdict: str, ratio: float) -> str:
        """Which way the metric moved as compare's `verdict` has it (higher, lower; equal,
        none and too noisy are unchanged), in the rule's words: worse is the way it limits
        (a rise for max_increase), better the other way. With too few runs for a verdict the
        medians' `ratio` (candidate / baseline) decides, as it decides the rule: a move
        compare would print as 0.0 % is unchanged unless it breaks the rule."""
        if verdict == "too few runs" and (abs(ratio - 1) >= NEGLIGIBLE or self.broken_by(ratio)):
            verdict = "higher" if ratio > 1 else "lower"
        if verdict not in ("higher", "lower"):
            return "unchanged"
        return "worse" if (verdict == "higher") == (self.kind == "max_increase") else "better"


def load_rules(path: Path, metrics: Iterable[str]) -> List[Rule]:
    """The rules of a file, each metric checked against `metrics` (the names the
    baseline's summary holds); BadInput naming file, line and key for anything else."""
    try:
        data, lines = load_with_lines(check_regular(path))
    except (OSError, NotAFile, YamlError) as e:
        raise BadInput(f"rules file {path}: {e}") from None
    known = set(metrics)

    def bad(key, what):
        line = lines.get(key)
        where = f"{path}:{line}" if line else str(path)
        return BadInput(f"{where}: {'.'.join(key) if len(key) > 1 else key[0]}: {what}")

    if not isinstance(data, dict) or not data:
        raise BadInput(f"{path}: expected a mapping of metric: {{max_increase: N%}} or "
                       f"{{max_decrease: N%}}, got {type(data).__name__}")
    out = []
    for metric, limits in data.items():
        metric = str(metric)
        if metric not in known:
            close = sorted(k for k in known if k.split(".")[0] == metric.split(".")[0])
            hint = f" (the baseline has {', '.join(close)})" if close else \
                " (a summary metric as metric.stat, e.g. ttft.p99)"
            raise bad((metric,), f"unknown metric{hint}")
        if not isinstance(limits, dict) or not limits:
            raise bad((metric,), f"expected {{max_increase: N%}} or {{max_decrease: N%}}, "
                                 f"got {limits!r}")
        for kind, limit in limits.items():
            if kind not in KINDS:
                raise bad((metric, str(kind)), f"unknown rule; expected {' or '.join(KINDS)}")
            fraction = _fraction(limit)
            if fraction is None:
                raise bad((metric, kind), f"expected a percentage such as 5% (or a fraction "
                                          f"such as 0.05), got {limit!r}")
            if kind == "max_decrease" and fraction >= 1:  # candidate / baseline below 0
                raise bad((metric, kind), f"{limit} can never be broken: a metric falls by "
                                          f"100% at most (to 0); give a limit below 100%")
            out.append(Rule(metric, kind, fraction))
    return out


def _fraction(value) -> Optional[float]:
    """'5%' -> 0.05, 0.05 -> 0.05; None for anything else."""
    if isinstance(value, str):
        match = PERCENT.match(value)
        if match:
            return float(match.group(1)) / 100
    elif not isinstance(value, bool) and isinstance(value, (int, float)) \
            and math.isfinite(value) and value >= 0:
        return float(value)
    return None
