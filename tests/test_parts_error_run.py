"""steptrace compare of a real measured run (the tiny model on the CPU) and the same
workload modeled on a device profile: the per-part section in --json."""

import json
import math
from pathlib import Path

import pytest

from harness.commands import main

pytestmark = pytest.mark.slow

QUICKSTART = Path(__file__).resolve().parents[1] / "workloads" / "quickstart.yaml"


def run(tmp_path, *overrides):
    """`steptrace run` of the quickstart's first 20 requests; the run's folder."""
    output = tmp_path / "-".join(overrides or ("measured",)).replace(":", "_")
    argv = ["run", str(QUICKSTART), "--set", "trace.limit=20", "--set", f"output={output}",
            "--set", "telemetry.enabled=false"]
    assert main(argv + [a for o in overrides for a in ("--set", o)]) == 0
    (folder,) = (output / "quickstart").iterdir()
    return folder


def test_a_measured_run_against_its_modeled_twin_has_finite_part_errors(tmp_path, capsys):
    measured, modeled = run(tmp_path), run(tmp_path, "device=modeled:h100")
    capsys.readouterr()
    assert main(["compare", str(measured), "--", str(modeled), "--json"]) == 0
    parts = json.loads(capsys.readouterr().out)["step_parts"]
    assert (parts["measured_arm"], parts["profile"], parts["not_compared"]) == ("A", "H100", "")
    by_name = {p["part"]: p for p in parts["parts"]}
    for name in ("attention", "experts", "forward"):
        part = by_name[name]
        assert math.isfinite(part["error"]) and 0 < part["steps_compared"]
        for bucket in part["buckets"]:
            assert bucket["measured_s"] > 0 and bucket["modeled_s"] > 0
            assert bucket["steps_measured"] > 0 and bucket["steps_modeled"] > 0
            assert bucket["error"] == pytest.approx(bucket["modeled_s"] / bucket["measured_s"] - 1)
    # one device, no EP: no all-to-all measured, and none shown as 0
    assert {"dispatch", "combine"} <= set(parts["left_out"]) and "dispatch" not in by_name
