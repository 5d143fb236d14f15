"""The frontier search (docs/frontier.md): its sweep-file keys, the deployments it considers,
its estimates, and a whole search on a small modeled device, read as a person reads it
(the CLI's exit status and --json, the tables, frontier.md)."""

import json
import math
from pathlib import Path

import pandas as pd
import pytest
import yaml

from harness.commands import main
from harness.schema import TABLES
from harness.sweeps.frontier.estimate import tokens_per_step
from harness.sweeps.frontier.space import candidates, widths
from harness.sweeps.points.sweep_file import SweepError, load_sweep

BASE = {
    "trace": {"generate": {"requests": 64, "rate": 10, "prompt": {"fixed": 512},
                           "output": {"fixed": 32}}},
    "engine": {"max_num_batched_tokens": 8192, "max_num_seqs": 4, "block_size": 64},
    "model": "deepseek-v3", "device": "modeled:H200", "precision": "fp8",
    "slo": {"ttft": 2.0, "tpot": 0.1},
    "deployment": {"devices": 8, "precision": {"kv": "fp8", "dispatch": "fp8",
                                               "combine": "bf16"}},
    "calibration_requests": 0, "telemetry": {"enabled": False},
}


def sweep_file(tmp_path, search, axes=None, mode=None):
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(BASE))
    data = {"name": "fr", "base": "base.yaml", "axes": axes or {"device": ["modeled:H200"]},
            "search": {"method": "frontier", **search}}
    if mode:
        data["mode"] = mode
    path = tmp_path / "fr.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.mark.parametrize("search, axes, mode, message", [
    ({"levels": []}, None, None, "search.levels: expected a non-empty list"),
    ({"levels": [20, 20]}, None, None, "search.levels: each level once"),
    ({"mtp": [-1]}, None, None, "search.mtp: expected a list of draft-token counts"),
    ({"keep": 0}, None, None, "search.keep: expected an integer >= 1"),
    ({"margin": 1}, None, None, "search.margin: expected a number in [0, 1)"),
    ({"colocated": False, "disaggregated": False}, None, None, "no deployment to search"),
    ({"shape": 1}, None, None, "search.shape: unknown key for method frontier"),
    ({}, None, "capacity", "expected mode: run, got capacity"),
    ({}, {"deployment.moe.ep": [8]}, None, "axes.deployment.moe.ep: set by search.method "
                                           "frontier"),
    ({}, {"deployment": [{"devices": 8}]}, None, "axes.deployment: set by search.method"),
    ({}, {"engine.num_mtp": [1]}, None, "axes.engine.num_mtp: set by search.method"),
])
def test_a_wrong_frontier_search_names_its_key(tmp_path, search, axes, mode, message):
    with pytest.raises(SweepError, match=r"fr\.yaml:\d+: ") as e:
        load_sweep(sweep_file(tmp_path, search, axes, mode))
    assert message in str(e.value)


def test_the_deployments_precision_and_stack_may_be_axes(tmp_path):
    sweep = load_sweep(sweep_file(tmp_path, {}, {"device": ["modeled:H200"],
                                                  "deployment.stack": ["sglang"]}))
    assert sweep.frontier.levels == (25.0, 50.0, 75.0, 100.0, 125.0, 150.0)


def test_widths_are_powers_of_two_and_the_scaleup_domain():
    assert widths(scaleup=72, most=72, experts=256) == [4, 8, 16, 32, 64, 72]
    assert widths(scaleup=8, most=64, experts=256) == [4, 8, 16, 32, 64]
    assert widths(scaleup=8192, most=128, experts=256) == [4, 8, 16, 32, 64, 128]


def test_the_space_by_hand():
    """NVL72, instances of at most 16, no MTP: DEP 4, 8, 16 and TEP 4, 8, each under the
    vote and mixed (10 co-located); prefill DEP4, TEP4, DEP8, TEP8 before each of the 5
    decode shapes (20 P/D)."""
    space = candidates(scaleup=72, most=16, heads=128, experts=256, mtps=(0,))
    labels = [c.label for c in space]
    assert len(space) == 30 and len(set(labels)) == 30
    assert sum(not c.disaggregated for c in space) == 10
    assert "TEP8 mixed" in labels and "P TEP4 + D DEP16" in labels
    # attention TP only where the heads divide, and within the scale-up domain
    assert not any("TEP" in c.label for c in candidates(8, 8, 6, 256, (0,)))
    assert not any("TEP8" in c.label for c in candidates(4, 8, 128, 256, (0,)))
    with_mtp = candidates(scaleup=72, most=16, heads=128, experts=256, mtps=(0, 3))
    assert len(with_mtp) == 60 and sum(c.mtp == 3 for c in with_mtp) == 30


def test_the_redundant_experts_make_the_experts_divide():
    shape = next(c for c in candidates(72, 72, 128, 256, (0,)) if c.label == "DEP72 vote")
    values = shape.decode.values(256)
    assert values["redundant_experts"] == 32 and (256 + 32) % 72 == 0
    assert values["attention"] == {"dp": 72, "tp": 1} and values["moe"]["ep"] == 72


def test_tokens_a_step_count_leading_accepted_drafts():
    assert tokens_per_step(0, 0.8) == 1
    assert tokens_per_step(3, 0.5) == pytest.approx(1 + 0.5 + 0.25 + 0.125)


def test_a_ladder_stops_where_its_steady_window_misses_the_slo():
    """Not on the whole run's attainment: a closed loop's first wave arrives at once and
    queues for its prefill, which no steady load does."""
    from harness.analysis.steady_state import SteadyState
    from harness.sweeps.frontier.ladder import _missed
    from harness.workload.views import SloKeys

    window = SteadyState(True, "", ttft_p90_s=2.5, tpot_p90_s=0.04)
    assert _missed(window, SloKeys(ttft=2.0, tpot=None, e2e=None)).startswith(
        "the SLO: TTFT p90 over the steady window 2.5 s, over its 2 s")
    assert _missed(window, SloKeys(ttft=3.0, tpot=0.03, e2e=None)).startswith(
        "the SLO: TPOT p90")
    assert _missed(window, SloKeys(ttft=3.0, tpot=0.05, e2e=None)) == ""
    assert _missed(SteadyState(False, "too short"), SloKeys(ttft=0.1, tpot=None, e2e=None)) == ""


@pytest.mark.slow
def test_a_search_answers_in_its_tables_and_frontier_md(tmp_path, capsys):
    path = sweep_file(tmp_path, {"mtp": [0], "most": 8, "keep": 2, "levels": [20, 40, 1000],
                                 "disaggregated": False})
    code = main(["sweep", str(path), "--set", f"output={tmp_path / 'out'}", "--workers", "2",
                 "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0, out
    folder = tmp_path / "out" / "fr"
    points = pd.read_parquet(folder / "frontier_points.parquet")
    assert list(points.columns) == list(TABLES["frontier_points"].names)
    assert len(points) == out["points"] and set(points["point"]) == \
        {r["point"] for r in out["rows"]}
    # each ladder climbs 1, 2, 4 sequences a rank (the batch cap, 4) on every decode rank
    for _, ladder in points.groupby("deployment"):
        assert list(ladder["batch"]) == [1, 2, 4]
        ranks = ladder["concurrency"] // ladder["batch"]
        assert (ranks == ranks.iloc[0]).all() and (ladder["concurrency"] % ladder["batch"] == 0).all()
    assert points["steady"].all() and points["front_output"].any()
    steady, whole = (points["output_tokens_per_s_per_device"],
                     points["whole_run_output_tokens_per_device"])
    assert (steady >= whole * 0.99).all()  # fill and drain left out: never slower
    deployments = pd.read_parquet(folder / "frontier_deployments.parquet")
    assert set(deployments["state"]) >= {"kept", "refused"}
    assert (deployments["state"] == "kept").sum() == 2
    readings = pd.read_parquet(folder / "frontier_readings.parquet")
    high = readings[readings["level"] == 1000].iloc[0]
    assert math.isnan(high["value"]) and high["reason"].startswith("above the fastest point")
    found = readings[readings["value"].notna()]
    assert (found["low"] <= found["value"]).all() and (found["value"] <= found["high"]).all()
    assert (found["ratio"] == 1).all()  # the only device is its own reference
    assert set(readings["metric"]) == {"output", "total", "per_kw", "per_dollar_hour"}
    by = {m: readings[readings["metric"] == m].set_index("level")["value"]
          for m in ("output", "per_kw", "per_dollar_hour")}
    assert (by["per_kw"].notna() == by["output"].notna()).all()  # power modeled: a profile's
    assert by["per_dollar_hour"].isna().all()  # no prices in the sweep file
    text = (folder / "frontier.md").read_text()
    assert "| modeled:H200 | 1000 | - | - | above the fastest point" in text


def test_a_reference_no_point_resolves_to_exits_2_naming_the_devices(tmp_path, capsys):
    path = sweep_file(tmp_path, {"reference": "modeled:B200"})
    assert main(["sweep", str(path), "--set", f"output={tmp_path / 'out'}"]) == 2
    err = capsys.readouterr().err
    assert "search.reference: expected one of the devices the points resolve to " \
           "(modeled:H200), got 'modeled:B200'" in err
    assert not (tmp_path / "out").exists()


def test_a_device_that_is_not_modeled_exits_2_naming_it(tmp_path, capsys):
    path = sweep_file(tmp_path, {}, {"device": ["cpu"]})
    assert main(["sweep", str(path), "--set", f"output={tmp_path / 'out'}",
                 "--set", "model=tiny", "--set", "deployment.devices=1"]) == 2
    assert ("search.method frontier: cpu: the search estimates and runs each deployment on "
            "a modeled device's virtual clock: expected modeled:<profile>") \
        in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_device_left_without_a_deployment_exits_2_naming_it(tmp_path, capsys):
    """Instances of at most 4 H200s cannot hold DeepSeek-V3's weights."""
    path = sweep_file(tmp_path, {"mtp": [0], "most": 4})
    assert main(["sweep", str(path), "--set", f"output={tmp_path / 'out'}"]) == 2
    err = capsys.readouterr().err
    assert "modeled:H200 is left without a deployment to run" in err
    assert "weights about" in err
    assert not (tmp_path / "out" / "fr" / "frontier_points.parquet").exists()


def test_every_frontier_table_is_declared_and_documented():
    doc = (Path(__file__).resolve().parents[1] / "docs" / "tables.md").read_text()
    for name in ("frontier_points", "frontier_deployments", "frontier_readings"):
        assert name in TABLES and f"## {name}\n" in doc
