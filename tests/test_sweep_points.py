"""steptrace sweep's pure parts (docs/sweeps.md): the grid, zip and where expansion, the
where grammar, the sweep file's errors, the point's hash, refused points, the Pareto
front. No point runs here."""

import pytest

from harness.analysis.pareto import front
from harness.sweeps.points.expand import grid, kept, sample
from harness.sweeps.points.point import Point, Refused, point_key, resolve, set_item
from harness.sweeps.points.sweep_file import SweepError, load_sweep, not_a_key
from harness.sweeps.points.where import WhereError, compile_where
from harness.workload import load_workload

TINY = """trace:
  generate: {requests: 12, rate: 200, prompt: {uniform: [4, 40]}, output: {uniform: [1, 8]}}
engine: {max_num_batched_tokens: 256, num_kv_blocks: 256}
model: tiny
device: modeled:B200
clock: virtual
calibration_requests: 0
telemetry: {enabled: false}
"""


def sweep_file(tmp_path, text, base=TINY):
    (tmp_path / "base.yaml").write_text(base)
    path = tmp_path / "s.yaml"
    path.write_text(text)
    return path


def test_the_grid_varies_the_first_axis_slowest():
    assert grid({"a": [1, 2], "b": ["x", "y"]}) == [
        {"a": 1, "b": "x"}, {"a": 1, "b": "y"}, {"a": 2, "b": "x"}, {"a": 2, "b": "y"}]


def test_zipped_axes_move_together_as_one_dimension():
    points = grid({"a": [1, 2], "c": [0, 5], "b": [10, 20]}, zips=[["b", "a"]])
    assert points == [{"a": 1, "c": 0, "b": 10}, {"a": 1, "c": 5, "b": 10},
                      {"a": 2, "c": 0, "b": 20}, {"a": 2, "c": 5, "b": 20}]


def test_where_keeps_the_points_it_holds_for():
    where = compile_where("deployment.moe.ep * 2 <= devices and not device == 'cpu'",
                          ["deployment.moe.ep", "devices", "device"])
    points = grid({"deployment.moe.ep": [4, 8], "devices": [8, 16], "device": ["cpu", "x"]})
    assert kept(points, where) == [
        {"deployment.moe.ep": 4, "devices": 8, "device": "x"},
        {"deployment.moe.ep": 4, "devices": 16, "device": "x"},
        {"deployment.moe.ep": 8, "devices": 16, "device": "x"}]


def test_where_may_name_workload_keys_beside_the_axes():
    where = compile_where("deployment.devices == deployment.attention.dp",
                          ["deployment.attention.dp"], not_a_key)
    assert where.names == {"deployment.devices", "deployment.attention.dp"}
    with pytest.raises(WhereError, match=r"deployment.device is not an axis \(the axes: "
                                         r"deployment.attention.dp\) and not a workload key: "
                                         r"device is not a key of deployment"):
        compile_where("deployment.device == 8", ["deployment.attention.dp"], not_a_key)


@pytest.mark.parametrize("text, value", [
    ("a % 3 == 1", True), ("1 < a < 3", False), ("-a + 1 == -3 or false", True),
    ("a / 8 == 0.5 and true", True), ("a - 1 != 3", False)])
def test_where_arithmetic_and_comparisons(text, value):
    assert compile_where(text, ["a"])({"a": 4}) is value


@pytest.mark.parametrize("text, said", [
    ("__import__('os').system('true')", "Call is not allowed"),
    ("a.__class__", "a.__class__ is not an axis"),
    ("().__class__.__bases__", "Attribute is not allowed"),
    ("(lambda: 1)()", "Call is not allowed"),
    ("lambda: 1", "Lambda is not allowed"),
    ("a[0]", "Subscript is not allowed"),
    ("a ** 99999", "BinOp is not allowed"),
    ("a in [1]", "Compare is not allowed"),
    ("b == 1", "b is not an axis (the axes: a)"),
    ("a ==", "not an expression"),
])
def test_where_refuses_what_is_not_in_its_grammar(text, said):
    with pytest.raises(WhereError) as e:
        compile_where(text, ["a"])
    assert said in str(e.value)


def test_where_says_where_it_cannot_be_evaluated():
    with pytest.raises(WhereError, match="at {'a': 'x'}"):
        compile_where("a < 1", ["a"])({"a": "x"})
    with pytest.raises(WhereError, match="arithmetic takes numbers, got 'x' and 10000000000"):
        compile_where("a * 10000000000 == ''", ["a"])({"a": "x"})


def test_random_sampling_is_seeded_and_keeps_the_grids_order():
    points = grid({"a": list(range(10))})
    assert sample(points, 3, 7) == sample(points, 3, 7)
    chosen = [p["a"] for p in sample(points, 3, 7)]
    assert chosen == sorted(chosen) and len(set(chosen)) == 3
    assert sample(points, 20, 0) == points


def test_a_sweep_file_read_whole(tmp_path):
    path = sweep_file(tmp_path, "base: base.yaml\nmode: capacity\naxes:\n  device: [a, b]\n"
                                "  engine.num_mtp: [0, 1]\nzip: [[device, engine.num_mtp]]\n"
                                "where: engine.num_mtp == 0\nsearch: {method: random, n: 1}\n")
    sweep = load_sweep(path)
    assert (sweep.name, sweep.base, sweep.mode) == ("s", tmp_path / "base.yaml", "capacity")
    assert sweep.axes == {"device": ("a", "b"), "engine.num_mtp": (0, 1)}
    assert (sweep.zips, sweep.method, sweep.n, sweep.seed) == \
        ((("device", "engine.num_mtp"),), "random", 1, 0)


@pytest.mark.parametrize("text, said", [
    ("base: base.yaml\naxes: {device: [a], engine.num_mtp: [0, 1]}\n"
     "zip: [[device, engine.num_mtp]]\n",
     "s.yaml:3: zip: group 1: axes that move together need as many values each, got "
     "device 1, engine.num_mtp 2"),
    ("base: base.yaml\naxes: {device: [a]}\nzip: [[devices]]\n",
     "s.yaml:3: zip: group 1: 'devices' is not an axis"),
    ("base: base.yaml\naxes: {device: [a]}\nsearch: {method: optuna, n: 4}\n",
     "s.yaml:3: search.objective: expected a column of the sweep table to optimize"),
    ("base: base.yaml\naxes: {device: [a]}\nsearch: {method: optuna, n: 4, objective: "
     "goodput, direction: up}\n", "s.yaml:3: search.direction: expected one of maximize"),
    ("base: base.yaml\naxes: {device: [a]}\nsearch: {method: bayes}\n",
     "s.yaml:3: search.method: expected one of grid, random, optuna, pd_ratio, frontier, got 'bayes'"),
    ("base: base.yaml\naxes: {device: [a]}\nsearch: {method: random}\n",
     "s.yaml:3: search.n: expected an integer >= 1, got None"),
    ("base: base.yaml\naxes: {engine.no_such_key: [1]}\n",
     "s.yaml:2: axes.engine.no_such_key: not a workload key: no_such_key is not a key of engine"),
    ("base: base.yaml\naxes: {output: [a]}\n", "axes.output: output is set by the sweep"),
    ("base: base.yaml\naxes: {engine.nope.deeper: [1]}\n",
     "not a workload key: nope is not a key of engine"),
    ("base: base.yaml\naxes: {device: a}\n", "axes.device: expected a non-empty list"),
    ("base: base.yaml\naxes: {device: [a]}\nwhere: \"__import__('os')\"\n",
     "s.yaml:3: where: \"__import__('os')\": Call is not allowed"),
    ("base: base.yaml\naxes: {device: [a]}\nmode: fast\n", "mode: expected one of run, capacity"),
    ("base: base.yaml\naxes: {device: [a]}\nwhere: deployment.devices > 1\nsearch: {method: "
     "optuna, n: 4, objective: goodput}\n",
     "s.yaml:3: where: 'deployment.devices > 1': an optuna search filters its draws by axes "
     "alone, not deployment.devices"),
    ("axes: {device: [a]}\n", "s.yaml: base: expected the base workload's path"),
    ("base: base.yaml\naxes: {device: [a]}\nbases: x\n", "s.yaml:3: bases: unknown key"),
])
def test_a_bad_sweep_file_is_named_by_file_line_and_key(tmp_path, text, said):
    with pytest.raises(SweepError) as e:
        load_sweep(sweep_file(tmp_path, text))
    assert said in str(e.value)


def test_set_items_read_back_to_the_value():
    assert set_item("device", "modeled:B200") == "device=modeled:B200"
    assert set_item("name", "8") == 'name="8"'  # YAML would read 8, a number
    assert set_item("x", [1, 2]) == "x=[1, 2]" and set_item("x", None) == "x=null"


def test_the_hash_is_stable_and_moves_exactly_with_a_resolved_value(tmp_path):
    (tmp_path / "base.yaml").write_text(TINY)

    def key(*sets, mode="run"):
        return point_key(load_workload(tmp_path / "base.yaml", sets).values, mode)
    same = key()
    assert key() == same and len(same) == 12 and int(same, 16) >= 0
    assert key("engine.max_num_batched_tokens=256") == same  # the default's own value
    assert key("trace.generate.rate=200.0") == same  # 200 and 200.0 alike
    assert key("output=/elsewhere") == same  # where it is written is not what it is
    assert len({same, key("trace.generate.rate=201"), key("engine.num_mtp=1"),
                key("device=modeled:H200"), key(mode="capacity")}) == 5


def test_an_invalid_point_is_refused_with_its_reason(tmp_path):
    (tmp_path / "base.yaml").write_text(TINY)
    base, folder = tmp_path / "base.yaml", tmp_path / "out"
    refused = resolve(base, "run", {"engine.max_num_batched_tokens": 0}, (), folder, "device")
    assert isinstance(refused, Refused) and "engine.max_num_batched_tokens" in refused.reason
    twice = resolve(base, "run", {"gil": "both"}, (), folder, "device")
    assert isinstance(twice, Refused) and "a point is one run, but the workload plans 2" \
        in twice.reason
    no_slo = resolve(base, "capacity", {"device": "modeled:H200"}, (), folder, "device")
    assert isinstance(no_slo, Refused) and "slo:" in no_slo.reason
    (tmp_path / "t.csv").write_text("arrival_s,prompt_len,output_len\n0,8,4\n0,9,4\n")
    base.write_text(TINY.replace("  generate: {requests: 12, rate: 200,", "  file: t.csv\n#"))
    at_once = resolve(base, "capacity", {"slo.ttft": 1}, (), folder, "device")
    assert isinstance(at_once, Refused) and "arrive at one instant" in at_once.reason


def test_a_point_keeps_the_bases_sets_but_an_axiss_own(tmp_path):
    (tmp_path / "base.yaml").write_text(TINY)
    point = resolve(tmp_path / "base.yaml", "run", {"engine.num_mtp": 1},
                    ("engine.num_mtp=2", "trace.generate.requests=4", "output=/x"),
                    tmp_path / "out", "engine.num_mtp")
    assert isinstance(point, Point)
    assert point.overrides == ("trace.generate.requests=4", "engine.num_mtp=1",
                               f"output={tmp_path / 'out' / 'points' / point.key}")
    assert (point.device, point.front) == ("modeled:B200", "1")


def test_the_front_is_each_groups_unbeaten_points():
    pairs = [(10, 1), (5, 5), (4, 4), (1, 10), (10, 1), (20, 20), (float("nan"), 50)]
    groups = ["a"] * 5 + ["b"] * 2
    assert front(groups, pairs, [True] * 7) == [True, True, False, True, True, True, False]
    assert front(groups, pairs, [False, True, True, True, True, True, True])[4]
    assert not front(["a", "a"], [(1, 1), (2, 2)], [True, False])[1]
