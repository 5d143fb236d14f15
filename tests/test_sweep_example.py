"""The shipped worked example, workloads/sweeps/sm100_vs_ascend950.yaml (docs/sweeps.md,
"Worked example"): a valid sweep file whose every point resolves, none refused, as many as
the docs say; and its P/D ratio search's. Nothing runs."""

import re
from pathlib import Path

import pytest

from harness.sweeps.points.execute import plan

REPO = Path(__file__).parents[1]
EXAMPLE = REPO / "workloads" / "sweeps" / "sm100_vs_ascend950.yaml"


@pytest.mark.slow  # resolves 32 workloads of DeepSeek-R1 (about 1 s)
def test_the_worked_example_expands_to_the_documented_points(tmp_path):
    the_plan = plan(EXAMPLE, (f"output={tmp_path}",))
    assert the_plan.sweep.mode == "capacity" and the_plan.refused == []
    points = the_plan.unique
    docs = (REPO / "docs" / "sweeps.md").read_text()
    example = docs[docs.index("## Worked example"):docs.index("## Speed")]
    documented = int(re.search(r"(\d+) points, none refused", example).group(1))
    assert len(the_plan.points) == len(points) == documented == 32
    assert {p.device for p in points} == {"modeled:B200", "modeled:GB200",
                                          "modeled:Ascend 950DT"}
    pd = [p for p in points if p.axes["deployment"].get("prefill")]
    assert len(pd) == 12 and all(p.axes["engine.overlap"] is False for p in pd)
    for p in points:  # DP attention and EP over every device of an instance
        for part in (p.axes["deployment"].get(k, p.axes["deployment"])
                     for k in ("prefill", "decode")):
            assert part["devices"] == part["attention"]["dp"] == part["moe"]["ep"]


@pytest.mark.slow  # resolves its workloads (about 0.2 s)
def test_the_pd_ratio_example_is_a_valid_search(tmp_path):
    the_plan = plan(EXAMPLE.with_name("sm100_vs_ascend950_pd_ratio.yaml"),
                    (f"output={tmp_path}",))
    assert (the_plan.sweep.method, the_plan.sweep.near) == ("pd_ratio", 1)
    assert len(the_plan.unique) == 2 and the_plan.refused == []
