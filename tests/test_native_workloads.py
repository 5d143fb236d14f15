"""Every bundled workload on a modeled device, replayed by both loops: the C++ loop is the
one `auto` picks, and the two runs' tables are equal as `steptrace gate` compares a modeled
run (harness/analysis/exact.py). Traces are cut to their first requests to keep the Python
loop's runs short. DeepEP's low-latency series is held at EP8 to EP128, past 64 ranks:
EP256 takes the same path on twice the ranks, and the most time of any (building 256
ranks' pools, twice)."""

from pathlib import Path

import pytest

from harness.analysis.exact import TABLES, first_difference
from harness.sweeps.sweep import run_workload
from harness.workload import load_workload

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 1500  # requests of each trace
SAME_PATH = {"validation/deepep_ll_ep256.yaml"}  # as deepep_ll_ep128.yaml
MODELED = sorted(p.relative_to(ROOT / "workloads").as_posix()
                 for p in (ROOT / "workloads").rglob("*.yaml")
                 if "\ndevice: modeled:" in p.read_text()
                 and p.relative_to(ROOT / "workloads").as_posix() not in SAME_PATH)


@pytest.mark.slow
@pytest.mark.parametrize("name", MODELED)
def test_both_loops_write_equal_tables(name, tmp_path):
    assert load_workload(ROOT / "workloads" / name).values["replay_loop"] == "cpp"
    runs = {}
    for loop in ("python", "cpp"):
        workload = load_workload(ROOT / "workloads" / name, [
            f"output={tmp_path / loop}", f"replay_loop={loop}", f"trace.limit={LIMIT}",
            "telemetry.enabled=false", "calibration_requests=0"])
        (runs[loop],) = run_workload(workload)
    for table in TABLES:
        assert first_difference(runs["python"], runs["cpp"], table) is None, table
