"""steptrace gate --bench: the benchmarks' C++ / reference ratios against a stored
baseline, on pytest-benchmark JSON files written here."""

import json

import pytest

from harness.commands import main
from tests.helpers import REPO


def bench_json(path, medians):
    """A pytest-benchmark result: {(impl, n): median seconds} of test_decode_round."""
    path.write_text(json.dumps({"benchmarks": [
        {"name": f"test_decode_round[{impl}-{n}]", "params": {"impl": impl, "n": n},
         "stats": {"median": median}} for (impl, n), median in medians.items()]}))
    return str(path)


def test_update_stores_the_lowest_ratio_and_the_gate_judges_against_it(tmp_path, capsys):
    a = bench_json(tmp_path / "a.json", {("cpp", 64): 1e-6, ("reference", 64): 100e-6})
    b = bench_json(tmp_path / "b.json", {("cpp", 64): 2e-6, ("reference", 64): 100e-6})
    ratios = tmp_path / "ratios.json"
    assert main(["gate", "--bench", a, b, "--baseline", str(ratios), "--update"]) == 0
    stored = json.loads(ratios.read_text())
    assert stored["ratios"] == {"test_decode_round[n=64]": 50.0}
    capsys.readouterr()
    # tolerance 0.6: the floor is 20x
    ok = bench_json(tmp_path / "ok.json", {("cpp", 64): 4e-6, ("reference", 64): 100e-6})
    assert main(["gate", "--bench", ok, "--baseline", str(ratios)]) == 0
    assert ": pass" in capsys.readouterr().out
    slow = bench_json(tmp_path / "slow.json", {("cpp", 64): 6e-6, ("reference", 64): 100e-6})
    assert main(["gate", "--bench", "--json", slow, "--baseline", str(ratios)]) == 1
    (check,) = json.loads(capsys.readouterr().out)["checks"]
    assert check == dict(case="test_decode_round[n=64]", baseline=50.0,
                         measured=pytest.approx(100 / 6), floor=pytest.approx(20),
                         broken=True)
    assert main(["gate", "--bench", slow, "--baseline", str(ratios)]) == 1
    out = capsys.readouterr().out
    assert "REGRESSION" in out and "test_decode_round[n=64]" in out and "BROKEN" in out


def test_the_committed_ratios_name_cases_the_suite_measures():
    stored = json.loads((REPO / "tests" / "bench" / "ratios.json").read_text())
    assert 0 <= stored["tolerance"] < 1
    assert {case.split("[")[0] for case in stored["ratios"]} == {"test_decode_round",
                                                                  "test_cost_model"}


def test_bad_input_exits_2(tmp_path, capsys):
    ratios = tmp_path / "ratios.json"
    ratios.write_text(json.dumps({"tolerance": 0.6, "ratios": {"test_decode_round[n=1024]": 300}}))
    other = bench_json(tmp_path / "o.json", {("cpp", 64): 1e-6, ("reference", 64): 1e-4})
    assert main(["gate", "--bench", other, "--baseline", str(ratios)]) == 2
    assert "no measurement of test_decode_round[n=1024]" in capsys.readouterr().err
    (tmp_path / "x.json").write_text("[]")
    assert main(["gate", "--bench", str(tmp_path / "x.json"), "--baseline", str(ratios)]) == 2
    assert "x.json: expected a JSON object" in capsys.readouterr().err
    (tmp_path / "y.json").write_text("{}")
    assert main(["gate", "--bench", str(tmp_path / "y.json"), "--baseline", str(ratios)]) == 2
    assert "not a pytest-benchmark JSON file" in capsys.readouterr().err
