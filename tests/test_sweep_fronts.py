"""A sweep's fronts, read as data from a hand-made sweep table: the best point per group at
each interactivity level and its ratio to the first group's, per device, per kW and per
$/h; the cost columns' arithmetic; the sweep file's prices; the busy share modeled power
is built from; a device profile's idle floor."""

import json
import math

import pandas as pd
import pytest

from engine.devices.profile import DEVICES_DIR, known_profiles, load_device_profile
from harness.analysis.report.sweep_data import label, levels_from, read_sweep
from harness.commands import main
from harness.errors import BadInput
from harness.record.run import Run
from harness.record.table_sink import write_table
from harness.sweeps.points.cost import costs
from harness.sweeps.points.power import busy_shares, run_power
from harness.sweeps.points.sweep_file import SweepError, load_sweep
from harness.sweeps.points.table import table
from tests.helpers import synthetic_run

B200, H200 = "modeled:B200", "modeled:H200"
# (device, max_num_seqs, tok/s per user, output tok/s per device, W per device)
POINTS = [(B200, 1, 10, 1000, 1000), (B200, 2, 30, 800, 1000), (B200, 4, 25, 600, 1000),
          (B200, 8, 60, 500, 1000), (B200, 16, 120, 200, 1000), (H200, 1, 15, 600, 400),
          (H200, 2, 55, 400, 400), (H200, 4, 110, 150, 400)]


def row(device, seqs, per_user, per_device, watts, status="done", reason=""):
    answer = status == "done"
    return dict(axes=json.dumps({"device": device, "engine.max_num_seqs": seqs}),
                point=f"{device[-4:].lower()}{seqs:02d}" if status != "refused" else "",
                device=device if status != "refused" else "", front=device, status=status,
                reason=reason, skipped=False, folder=f"points/p{seqs}", run_dir="r",
                outcome="run", rate=1.0, concurrency=None,
                output_tokens_per_device=per_device if answer else None,
                tokens_per_s_per_user=per_user if answer else None,
                output_tokens_per_s=per_device * 8 if answer else None, attainment=1.0,
                goodput=1.0, ttft_p50_s=0.1, ttft_p99_s=0.2, tpot_p50_s=1 / per_user,
                tpot_p99_s=0.1, power_w=watts if answer else None,
                power_source="modeled" if answer else None, busy=0.5 if answer else None)


def sweep_folder(tmp_path, extra=(), prices=None):
    rows = [row(*p) for p in POINTS] + list(extra)
    folder = tmp_path / "sweep"
    folder.mkdir()
    write_table(table(rows, prices or {B200: 5.0, H200: 2.0}), folder, "sweep", "parquet")
    return folder


def best(sweep, measure):
    return {(b.level, b.group): (b.point, b.value, b.ratio) for b in sweep.best(measure)}


def test_the_best_point_per_group_at_each_level_and_its_ratio_to_the_first(tmp_path):
    failed = row(H200, 8, 500, 9000, 400, status="failed", reason="RuntimeError: boom")
    sweep = read_sweep(sweep_folder(tmp_path, [failed]), None, (20, 50, 100, 200))
    assert sweep.groups == [B200, H200] and sweep.front_by == "device"
    got = best(sweep, "output_tokens_per_device")
    assert got[20, B200] == ("b20002", 800, 1.0) and got[20, H200] == ("h20002", 400, 0.5)
    assert got[50, B200][:2] == ("b20008", 500) and got[50, H200][2] == pytest.approx(0.8)
    assert got[100, H200] == ("h20004", 150, 0.75)
    assert got[200, B200][0] == "" and math.isnan(got[200, H200][2])  # none meets 200
    # per kW: H200 draws 400 W a device, B200 1,000 W: the ratio turns
    kw = best(sweep, "output_tokens_per_kw")
    assert kw[20, H200] == ("h20002", 1000, 1.25) and kw[20, B200][1] == 800
    per_dollar = best(sweep, "output_tokens_per_dollar_hour")
    assert per_dollar[20, B200][1] == 160 and per_dollar[20, H200][1] == 200
    assert list(sweep.not_done["reason"]) == ["RuntimeError: boom"]


def test_the_fronts_per_measure_leave_out_the_beaten_and_the_failed(tmp_path):
    failed = row(H200, 8, 500, 9000, 400, status="failed", reason="x")
    sweep = read_sweep(sweep_folder(tmp_path, [failed]))
    on = sweep.fronts("output_tokens_per_device")
    assert list(sweep.rows.loc[on, "point"]) == ["b20001", "b20002", "b20008", "b20016",
                                                 "h20001", "h20002", "h20004"]
    assert list(sweep.rows["pareto"]) == list(on)  # the sweep's own front agrees


def test_fronts_by_an_axis_and_a_key_that_is_no_axis(tmp_path):
    folder = sweep_folder(tmp_path)
    sweep = read_sweep(folder, "engine.max_num_seqs", (20,))
    assert sweep.groups == ["1", "2", "4", "8", "16"]
    assert {b.group: b.point for b in sweep.best("output_tokens_per_device")}["2"] == "b20002"
    assert sweep.rows["label"][0] == "device=modeled:B200"
    with pytest.raises(BadInput, match="engine.num_mtp: not an axis of the sweep"):
        read_sweep(folder, "engine.num_mtp")


def test_a_table_without_prices_or_power_draws_per_device_alone(tmp_path):
    rows = [dict(row(*p), power_w=None) for p in POINTS]
    (tmp_path / "s").mkdir()
    write_table(table(rows, {}), tmp_path / "s", "sweep", "parquet")
    assert read_sweep(tmp_path / "s").measures == ["output_tokens_per_device"]


def test_a_folder_whose_table_is_not_a_sweeps_is_bad_input(tmp_path):
    (tmp_path / "s").mkdir()
    pd.DataFrame({"x": [1]}).to_parquet(tmp_path / "s" / "sweep.parquet")
    with pytest.raises(BadInput, match="not a sweep table"):
        read_sweep(tmp_path / "s")


@pytest.mark.parametrize("text, levels", [("20,50,100", [20, 50, 100]), ("100, 7.5", [7.5, 100])])
def test_interactivity_levels(text, levels):
    assert levels_from(text) == levels


@pytest.mark.parametrize("text", ["20,,50", "fast", "0", "-5", "inf"])
def test_interactivity_levels_that_are_not_bad_input(text):
    with pytest.raises(BadInput, match="--interactivity"):
        levels_from(text)


def test_per_kw_and_per_dollar_hour():
    got = costs(dict(output_tokens_per_device=500.0, power_w=250.0, device=B200), {B200: 4.0})
    assert got == dict(output_tokens_per_kw=2000.0, price_per_hour=4.0,
                       output_tokens_per_dollar_hour=125.0)
    none = costs(dict(output_tokens_per_device=500.0, power_w=None, device=H200), {B200: 4.0})
    assert all(math.isnan(v) for v in none.values())


def test_prices_in_the_sweep_file(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text('base: b.yaml\naxes: {device: [modeled:B200]}\n'
                    'prices: {"modeled:B200": 5.5, modeled:H200: 3}\n')
    assert load_sweep(path).prices == {B200: 5.5, H200: 3.0}


@pytest.mark.parametrize("prices, message", [
    ("[5]", r"s.yaml:3: prices: expected a mapping of devices"),
    ('{"modeled:B200": -1}', r"s.yaml:3: prices.modeled:B200: expected dollars per "
                             r"device-hour, a number > 0, got -1"),
    ('{"modeled:B200": cheap}', r"prices.modeled:B200: expected dollars .* got 'cheap'"),
    ('{"modeled:B200": .inf}', r"prices.modeled:B200: expected dollars"),
])
def test_malformed_prices_name_the_key(tmp_path, prices, message):
    path = tmp_path / "s.yaml"
    path.write_text(f"base: b.yaml\naxes: {{device: [modeled:B200]}}\nprices: {prices}\n")
    with pytest.raises(SweepError, match=message):
        load_sweep(path)


def test_the_busy_share_counts_each_step_once_over_the_window():
    steps = pd.DataFrame(dict(  # two DP ranks' rows of each step; warm-up left out
        role=["colocated"] * 6, instance=[0] * 6, step=[0, 0, 1, 1, 2, 2],
        warmup=[True, True, False, False, False, False],
        t_start_s=[0.0, 0.0, 1.0, 1.0, 4.0, 4.0], t_end_s=[1.0, 1.0, 2.0, 2.0, 5.0, 5.0]))
    assert busy_shares(steps) == {"colocated": 0.5}  # 2 s in steps of a 4 s window
    pd_steps = pd.DataFrame(dict(
        role=["prefill", "prefill", "decode"], instance=[0, 1, 0], step=[0, 0, 0],
        warmup=[False] * 3, t_start_s=[0.0, 0.0, 0.0], t_end_s=[1.0, 2.0, 4.0]))
    assert busy_shares(pd_steps) == {"prefill": 0.375, "decode": 1.0}


def test_every_bundled_idle_floor_is_below_its_tdp(tmp_path):
    for name in known_profiles():
        p = load_device_profile(name)
        assert (p.idle_w is None) == (p.tdp_w is None), name
        if p.idle_w is not None:
            assert p.idle_w.kind == "assumption" and 0 < p.idle_w.value < p.tdp_w.value
    text = (DEVICES_DIR / "b200.yaml").read_text()
    bad = tmp_path / "dev.yaml"
    bad.write_text(text.replace("idle_w: {value: 200", "idle_w: {value: 2000"))
    with pytest.raises(ValueError, match=r"dev.yaml:\d+: idle_w.value: expected at most "
                                         r"tdp_w \(1000 W\), got 2000"):
        load_device_profile(bad)


@pytest.mark.parametrize("args, message", [
    (["--interactivity", "20,fast"], "--interactivity 20,fast: expected tokens/s per user"),
    (["--front-by", "engine.num_mtp"], "engine.num_mtp: not an axis of the sweep"),
    (["--trace-events"], "--trace-events is for runs"),
])
def test_the_sweep_pages_bad_input_is_exit_2_and_writes_nothing(tmp_path, capsys, args,
                                                                   message):
    folder = sweep_folder(tmp_path)
    assert main(["report", str(folder), "-o", str(tmp_path / "page"), *args]) == 2
    assert message in capsys.readouterr().err and not (tmp_path / "page").exists()


def test_front_by_and_interactivity_are_for_one_sweeps_folder(tmp_path, capsys):
    folder = sweep_folder(tmp_path)
    assert main(["report", str(folder), str(folder), "-o", str(tmp_path / "page"),
                 "--interactivity", "20"]) == 2
    assert "are for one sweep's folder" in capsys.readouterr().err


def test_measured_energy_gives_the_power_instead_of_the_model(tmp_path):
    """8 devices, 4,000 output tok/s at 2 J a token: 8,000 W, 1,000 W a device."""
    run = synthetic_run(tmp_path / "r", {"energy_per_output_token.value": (2.0, "J/token"),
                                         "throughput.output_tokens": (4000.0, "tok/s")},
                        values={"deployment": {"devices": 8}})
    power = run_power(Run.read(run))
    assert (power.watts, power.source) == (1000.0, "measured")
    without = synthetic_run(tmp_path / "r2", {"throughput.output_tokens": (4000.0, "tok/s")})
    assert run_power(Run.read(without)).source == ""  # measured, no energy: unknown


def test_a_deployment_axis_is_labelled_by_its_shape():
    pool = {"devices": 8, "attention": {"dp": 8}, "moe": {"ep": 8}, "micro_batches": 2}
    pd_axes = {"device": "modeled:B200", "engine.num_mtp": 1,
               "deployment": {"prefill": pool, "decode": {**pool, "instances": 2},
                              "kv_transfer": {"link": "scaleout"}}}
    assert label(pd_axes, "device") == "num_mtp=1 1P2D 8+8 kv=scaleout"
    colocated = {"deployment": {"devices": 72, "attention": {"dp": 72}, "moe": {"ep": 72},
                                "redundant_experts": 32}}
    assert label(colocated, "device") == "72 devices (+32 experts)"
    assert label({"deployment": {"devices": 8, "attention": {"dp": 4}}}, "x") == "8 devices DP4"
