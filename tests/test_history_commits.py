"""A history built from runs at several commits (docs/comparing.md, "History and change
points"): tiny modeled runs on the virtual clock, stamped with --commit and --date as the
commits c1..c10 of a checkout would be (a run's manifest records its checkout's git_sha and
git_date); from c6 on the engine's scheduler admits half the sequences the workload's
`engine.max_num_seqs` (8) says, as a commit changing the scheduler would, and the 12
requests, arriving at once, finish later: five commits either side, the fewest a change
point needs (change_points.MIN_SEGMENT). The workload is the same at every commit, so the
runs are one configuration, one series. `history detect --since c5` names c6 and exits 1; a
flat history exits 0."""

import json

import pytest

from harness.analysis import history_store
from harness.commands import main
from harness.workload import load
from tests.test_history import needs_otava

pytestmark = pytest.mark.core  # fifteen whole runs of the engine, tiny: about 6 s

WORKLOAD = """name: history-commits
trace:
  generate: {requests: 12, rate: 1000000, prompt: {uniform: [64, 256]}, output: {uniform: [16, 32]}}
engine: {max_num_seqs: 8, max_num_batched_tokens: 1024, num_kv_blocks: 256}
model: tiny
device: modeled:B200
clock: virtual
calibration_requests: 0
telemetry: {enabled: false}
"""
METRIC = "throughput.output_tokens"  # modeled: the same figure for the same scheduler


def runs(root, name, repeats, halved=False):
    """`repeats` runs of WORKLOAD in the order run; `halved`: by an engine whose scheduler
    admits half the sequences its workload configures (as a commit might change it), the
    workload and so its manifest as before."""
    out = root / name
    with pytest.MonkeyPatch.context() as patch:
        if halved:
            configured = load.SchedulerConfig
            patch.setattr(load, "SchedulerConfig", lambda **engine: configured(
                **{**engine, "max_num_seqs": engine["max_num_seqs"] // 2}))
        assert main(["run", str(root / "w.yaml"), "--set", f"output={out}", "--set",
                     f"repeats={repeats}"]) == 0
    found = sorted((out / "history-commits").glob("*-r*"), key=lambda p: int(p.name[
        p.name.rindex("-r") + 2:]))
    # runs of one process in one second share a name: named apart, as runs of two commits'
    # jobs would be
    return [run.rename(out / f"{name}-{i}") for i, run in enumerate(found)]


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """(stepped, flat): c1..c10 with max_num_seqs halved from c6, and c1..c10 unchanged
    (the first five runs of both the same)."""
    root = tmp_path_factory.mktemp("commits")
    (root / "w.yaml").write_text(WORKLOAD)
    stepped, flat = root / "stores" / "stepped", root / "stores" / "flat"
    before = runs(root, "before", 5)
    for store, at in ((stepped, before + runs(root, "after", 5, halved=True)),
                      (flat, before + runs(root, "flat", 5))):
        for i, run in enumerate(at, 1):
            assert main(["history", "add", str(run), "--store", str(store), "--commit",
                         f"c{i}", "--date", f"2026-11-{i:02d}T12:00:00Z"]) == 0
    return stepped, flat


def test_the_runs_are_stored_at_their_commits(stores):
    rows = history_store.read(stores[0])
    of_metric = rows[rows["metric"] + "." + rows["stat"] == METRIC].sort_values("commit")
    assert sorted(of_metric["commit"]) == sorted(f"c{i}" for i in range(1, 11))
    values = list(of_metric.sort_values("commit_date")["value"])
    assert len(set(values[:5])) == 1 and len(set(values[5:])) == 1  # modeled: exact
    assert values[5] < values[0]  # half the sequences at once: fewer tokens a second


@needs_otava
def test_detect_since_c5_names_c6_and_exits_1(stores, capsys):
    capsys.readouterr()
    assert main(["history", "detect", "--store", str(stores[0]), "--metric", METRIC,
                 "--since", "c5", "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    (point,) = out["change_points"]
    assert (point["commit_before"], point["commit_after"]) == ("c5", "c6")
    assert point["regression"] and point["direction"] == "lower" and out["regressions"] == 1


@needs_otava
def test_a_flat_history_exits_0(stores, capsys):
    assert main(["history", "detect", "--store", str(stores[1]), "--metric", METRIC,
                 "--since", "c5"]) == 0
