"""The speed benchmarks judged by their ratios: each case of tests/bench measures the C++
core and the pure-Python reference side by side, and their ratio (reference median / C++
median) is what stays put across machines, where absolute times do not.

A stored baseline (tests/bench/ratios.json, marked by its "kind") keeps, per case, the
lowest ratio of the measurements it was made from, and a tolerance: a ratio below baseline
x (1 - tolerance) is a regression. On a shared host the reference and the C++ side of a
case, measured one after the other, see different loads: ratios move by several times
between runs there (tests/bench/README.md), so the baseline is the lowest seen and the
tolerance wide.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, TypeGuard

from fileio.atomic import atomic_open
from fileio.regular import not_regular

from ..errors import BadInput

FAST = "cpp"        # the `impl` parameter of the C++ side; the other side is the reference
TOLERANCE = 0.6  # N = 1,024: 169x on a quiet host, 328 - 1,538x on a busy one (2026-12-01)
KIND = "steptrace gate --bench ratios"  # the "kind" that tells a ratios file from other JSON


@dataclass(frozen=True)
class RatioCheck:
    case: str
    baseline: float
    measured: float
    floor: float

    @property
    def broken(self) -> bool:
        return self.measured < self.floor


def read_json(path: Path) -> dict:
    data, why = _load(path)
    if why:
        raise BadInput(f"{path}: {why}")
    if not isinstance(data, dict):
        raise BadInput(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def _load(path: Path) -> Tuple[object, Optional[str]]:
    """(the file's JSON, None) or (None, why it cannot be read): never opens a FIFO, which
    would block until a writer came."""
    why = not_regular(path)
    if why:
        return None, why
    try:
        return json.loads(Path(path).read_text()), None
    except RecursionError:
        return None, "unreadable (JSON nested too deeply)"
    except (OSError, ValueError) as e:
        return None, f"unreadable ({e})"


def measured_ratios(path: Path) -> Dict[str, float]:
    """"test_decode_round[n=1024]": reference median / C++ median, from a pytest-benchmark
    JSON file (--benchmark-json), for every case measured on both sides. BadInput naming
    the file and the entry for anything but a benchmark's name, params and a median."""
    data = read_json(path)
    if not isinstance(data.get("benchmarks"), list):
        raise BadInput(f"{path}: no key 'benchmarks': not a pytest-benchmark JSON file "
                       f"(--benchmark-json)")
    sides: Dict[str, Dict[str, float]] = {}
    seen: Dict[Tuple[str, str], str] = {}
    for i, bench in enumerate(data["benchmarks"]):
        where, name, params, median = benchmark_entry(path, i, bench)
        impl = params.pop("impl", None)
        if impl is None:
            continue
        case = name.split("[")[0] + "[" + ",".join(
            f"{k}={v}" for k, v in sorted(params.items())) + "]"
        side = "fast" if impl == FAST else "reference"
        if (case, side) in seen:
            raise BadInput(f"{where}: a second measurement of {case} impl={impl} (the first: "
                           f"{seen[case, side]})")
        seen[case, side] = where
        sides.setdefault(case, {})[side] = median
    ratios = {}
    for case, s in sorted(sides.items()):
        if "fast" in s and "reference" in s:
            ratio = s["reference"] / s["fast"]  # medians near the float range overflow
            if not _positive(ratio):
                raise BadInput(f"{path}: {case}: reference / C++ median ({s['reference']!r} s / "
                               f"{s['fast']!r} s) is {ratio}, not a finite positive ratio")
            ratios[case] = ratio
    return ratios


def benchmark_entry(path: Path, i: int, bench) -> Tuple[str, str, dict, float]:
    """(where, name, params, median seconds) of benchmarks[i]; BadInput naming it."""
    where = f"{path}: benchmarks[{i}]"
    if not isinstance(bench, dict):
        raise BadInput(f"{where}: expected an object, got {type(bench).__name__}")
    name = bench.get("name")
    if not isinstance(name, str) or not name:
        raise BadInput(f"{where}: \"name\": expected the benchmark's test name, got {name!r}")
    where += f" ({name})"
    params = bench.get("params")
    if params is not None and not isinstance(params, dict):
        raise BadInput(f"{where}: \"params\": expected an object, got {params!r}")
    stats = bench.get("stats")
    median = stats.get("median") if isinstance(stats, dict) else None
    if not _positive(median):
        raise BadInput(f"{where}: stats.median: expected a positive number of seconds, got "
                       f"{median!r}")
    return where, name, dict(params or {}), float(median)


def _number(value) -> TypeGuard[float]:
    """A finite number: JSON's NaN and Infinity, which Python reads, are not; nor is true."""
    return not isinstance(value, bool) and isinstance(value, (int, float)) \
        and math.isfinite(value)


def _positive(value) -> TypeGuard[float]:
    return _number(value) and value > 0


def check(bench_json: Path, baseline: Path) -> List[RatioCheck]:
    """Every baseline ratio against the measured one; BadInput for a baseline that names no
    case, or a case the measurement lacks."""
    stored = read_json(baseline)
    ratios, tolerance = stored.get("ratios"), stored.get("tolerance")
    if not isinstance(ratios, dict) or not _number(tolerance) or not 0 <= tolerance < 1:
        raise BadInput(f"{baseline}: expected {{\"tolerance\": a number in [0, 1), "
                       f"\"ratios\": {{case: ratio}}}}")
    if not ratios:
        raise BadInput(f"{baseline}: \"ratios\" names no case: a ratios file judges at least "
                       f"one")
    for case, ratio in ratios.items():
        if not _positive(ratio):
            raise BadInput(f"{baseline}: ratios.{case}: expected a positive number, got "
                           f"{ratio!r}")
    measured = measured_ratios(bench_json)
    out = []
    for case, ratio in ratios.items():
        if case not in measured:
            raise BadInput(f"{bench_json}: no measurement of {case} (in the baseline "
                           f"{baseline}); measured: {', '.join(measured) or 'none'}")
        out.append(RatioCheck(case, float(ratio), measured[case], ratio * (1 - tolerance)))
    return out


def check_destination(baseline: Path, bench_jsons: Sequence[Path]) -> None:
    """BadInput unless store(bench_jsons, baseline) may write `baseline`: a path that does
    not exist, an empty file, or a ratios file (its "kind"); never a symbolic link nor one
    of the benchmark JSON files it reads."""
    baseline = Path(baseline)
    if baseline.is_symlink():
        raise BadInput(f"{baseline}: a symbolic link (to {os.readlink(baseline)}): --update "
                       f"writes a ratios file, not through a link; name the file itself")
    for path in map(Path, bench_jsons):
        if path.exists() and baseline.exists() and os.path.samefile(path, baseline):
            raise BadInput(f"{baseline}: the benchmark JSON file --update reads ({path}): "
                           f"the ratios go to a file of their own (tests/bench/ratios.json)")
    if not baseline.exists():
        return
    if not baseline.is_file():
        raise BadInput(f"{baseline}: not a file: --update writes a ratios file")
    if baseline.stat().st_size == 0:
        return  # nothing there to lose
    why = _not_ratios(baseline)
    if why:
        raise BadInput(f"{baseline} is not a ratios file: {why}; --update replaces only a "
                       f"ratios file (\"kind\": {json.dumps(KIND)}) or creates a new one")


def _not_ratios(path: Path) -> Optional[str]:
    """What the file is instead of a ratios file; None for one."""
    data, why = _load(path)
    if why:
        return why
    if not isinstance(data, dict):
        return f"a JSON {type(data).__name__}"
    if data.get("kind") == KIND:
        return None
    if "benchmarks" in data:
        return "a pytest-benchmark result (key 'benchmarks')"
    keys = ", ".join(map(repr, list(data)[:5])) or "none"
    return f"a JSON object with no \"kind\" (keys: {keys})"


def store(bench_jsons: Sequence[Path], baseline: Path) -> Dict[str, float]:
    """Write the lowest ratio of each case over the measurements as the baseline, with the
    default tolerance; the caller has checked `baseline` (check_destination). WriteFailed
    naming it for an OS error: the previous file stays as it was."""
    ratios: Dict[str, float] = {}
    for path in bench_jsons:
        measured = measured_ratios(path)
        if not measured:
            raise BadInput(f"{path}: no case measured on both sides (impl={FAST} and a "
                           f"reference)")
        for case, ratio in measured.items():
            ratios[case] = min(ratio, ratios.get(case, ratio))
    with atomic_open(baseline) as f:
        f.write(json.dumps(dict(kind=KIND, tolerance=TOLERANCE,
                                ratios={k: float(f"{v:.4g}") for k, v in ratios.items()}),
                           indent=1) + "\n")
    return ratios
