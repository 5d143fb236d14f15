"""pytest-benchmark results in the history (docs/comparing.md, "Benchmarks in the
history"): a `--benchmark-json` file is stored as one file of the store, like a run, one
row per benchmark: its median in seconds, the benchmark's name as the metric, `median` as
the stat. Every such metric is better lower (a time)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Optional

import pandas as pd
import pyarrow as pa

from ..errors import BadInput
from ..schema.summary import LOWER, better
from .bench_ratios import benchmark_entry, read_json
from .history_store import SCHEMA, Provenance, checked_provenance

WORKLOAD = "pytest-benchmark"  # the `workload` label of every benchmark's series
STAT = "median"


def better_way(labels: dict) -> Optional[str]:
    """The way a series' metric improves: a benchmark's time lower, a run's metric as the
    summary catalogue declares it (None: neither way)."""
    if labels["workload"] == WORKLOAD:
        return LOWER
    return better(labels["metric"], labels["stat"])


def read(path: Path) -> dict:
    """The file's JSON; BadInput unless it is pytest-benchmark's with a benchmark."""
    data = read_json(path)
    if not isinstance(data.get("benchmarks"), list) or not data["benchmarks"]:
        raise BadInput(f"{path}: no benchmark in it (key 'benchmarks'): not a "
                       f"pytest-benchmark JSON file (--benchmark-json)")
    return data


def key(data: dict) -> str:
    """The file's identity: when and where it was measured, of which commit, which
    benchmarks (the same measurements copied elsewhere are the same)."""
    machine, commit = _part(data, "machine_info"), _part(data, "commit_info")
    ident = json.dumps([WORKLOAD, data.get("datetime"), machine.get("node"), commit.get("id"),
                        [b.get("fullname") for b in data["benchmarks"] if isinstance(b, dict)]],
                       default=str)
    return hashlib.sha256(ident.encode()).hexdigest()[:32]


def provenance(path: Path, data: dict, commit: Optional[str],
               date: Optional[str]) -> Provenance:
    """--commit and --date, else the file's `commit_info` (`id`, `time`: the commit's);
    BadInput naming what neither gives."""
    info = _part(data, "commit_info")
    return checked_provenance(path, commit, date, info.get("id"), info.get("time"),
                              "benchmarked", "commit_info (id, time)", "commit_info's id")


def rows(path: Path, data: dict, prov: Provenance, runner: str = "") -> pa.Table:
    """One row per benchmark: its median (s). The configuration is the machine's CPU, the
    Python that ran it and the runner class named; the machine's node is the host."""
    machine = _part(data, "machine_info")
    cpu = _part(machine, "cpu")
    python = f"{machine.get('python_implementation', '')} {machine.get('python_version', '')}"
    entries = [benchmark_entry(path, i, b) for i, b in enumerate(data["benchmarks"])]
    labels = dict(run_key=key(data), run_id=path.stem, workload=WORKLOAD,
                  workload_hash=hashlib.sha256(python.encode()).hexdigest()[:16],
                  device=str(cpu.get("brand_raw") or machine.get("processor") or ""),
                  backend="cpu", modeled=False, gil_mode="", runner=runner,
                  host=str(machine.get("node", "")),
                  harness_version="", commit=prov.commit, commit_date=prov.date)
    frame = pd.DataFrame(dict(labels, metric=[name for _, name, _, _ in entries], stat=STAT,
                              value=[median for _, _, _, median in entries], unit="s"),
                         columns=SCHEMA.names)
    return pa.Table.from_pandas(frame, schema=SCHEMA, preserve_index=False)


def _part(data: dict, name: str) -> dict:
    """data[name] where it is an object; {} where it is missing or not one."""
    part = data.get(name)
    return part if isinstance(part, dict) else {}
