"""The speed benchmarks judged by their ratios: each case of tests/bench measures the C++
core and the pure-Python reference side by side, and their ratio (reference median / C++
median) is what stays put across machines, where absolute times do not.

A stored baseline (tests/bench/ratios.json) keeps, per case, the lowest ratio of the
measurements it was made from, and a tolerance: a ratio below baseline x (1 - tolerance)
is a regression. On a shared host the reference and the C++ side of a case, measured one
after the other, see different loads: ratios move by several times between runs there
(tests/bench/README.md), so the baseline is the lowest seen and the tolerance wide.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Sequence

from ..atomic import atomic_open
from ..commands.common import BadInput

FAST = "cpp"        # the `impl` parameter of the C++ side; the other side is the reference
TOLERANCE = 0.6  # N = 1,024: 169x on a quiet host, 328 - 1,538x on a busy one (2026-12-01)


@dataclass(frozen=True)
class RatioCheck:
    case: str
    baseline: float
    measured: float
    floor: float

    @property
    def broken(self) -> bool:
        return self.measured < self.floor


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise BadInput(f"{path}: unreadable ({e})") from None
    if not isinstance(data, dict):
        raise BadInput(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def measured_ratios(path: Path) -> Dict[str, float]:
    """"test_decode_round[n=1024]": reference median / C++ median, from a pytest-benchmark
    JSON file (--benchmark-json), for every case measured on both sides."""
    data = _read_json(path)
    if not isinstance(data.get("benchmarks"), list):
        raise BadInput(f"{path}: no key 'benchmarks': not a pytest-benchmark JSON file "
                       f"(--benchmark-json)")
    sides: Dict[str, Dict[str, float]] = {}
    for bench in data["benchmarks"]:
        params = dict(bench.get("params") or {})
        impl = params.pop("impl", None)
        if impl is None:
            continue
        case = bench["name"].split("[")[0] + "[" + ",".join(
            f"{k}={v}" for k, v in sorted(params.items())) + "]"
        sides.setdefault(case, {})["fast" if impl == FAST else "reference"] = \
            float(bench["stats"]["median"])
    return {case: s["reference"] / s["fast"] for case, s in sorted(sides.items())
            if "fast" in s and "reference" in s and s["fast"] > 0}


def check(bench_json: Path, baseline: Path) -> List[RatioCheck]:
    """Every baseline ratio against the measured one; BadInput for a baseline case the
    measurement lacks."""
    stored = _read_json(baseline)
    ratios, tolerance = stored.get("ratios"), stored.get("tolerance")
    if not isinstance(ratios, dict) or not isinstance(tolerance, (int, float)) \
            or not 0 <= tolerance < 1:
        raise BadInput(f"{baseline}: expected {{\"tolerance\": a number in [0, 1), "
                       f"\"ratios\": {{case: ratio}}}}")
    measured = measured_ratios(bench_json)
    out = []
    for case, ratio in ratios.items():
        if case not in measured:
            raise BadInput(f"{bench_json}: no measurement of {case} (in the baseline "
                           f"{baseline}); measured: {', '.join(measured) or 'none'}")
        out.append(RatioCheck(case, float(ratio), measured[case], ratio * (1 - tolerance)))
    return out


def store(bench_jsons: Sequence[Path], baseline: Path) -> Dict[str, float]:
    """Write the lowest ratio of each case over the measurements as the baseline, with the
    default tolerance."""
    ratios: Dict[str, float] = {}
    for path in bench_jsons:
        measured = measured_ratios(path)
        if not measured:
            raise BadInput(f"{path}: no case measured on both sides (impl={FAST} and a "
                           f"reference)")
        for case, ratio in measured.items():
            ratios[case] = min(ratio, ratios.get(case, ratio))
    with atomic_open(baseline) as f:
        f.write(json.dumps(dict(tolerance=TOLERANCE,
                                ratios={k: round(v, 1) for k, v in ratios.items()}),
                           indent=1) + "\n")
    return ratios
