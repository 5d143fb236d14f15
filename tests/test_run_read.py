"""The Run contract (harness/record/run.py): a run folder read back is the run as it was
written, Parquet or CSV alike; a table is read once, and a missing one names its file;
an older manifest, lacking newer keys, still reads, its absent keys None."""

import json

import pandas as pd
import pytest

from harness.errors import BadInput
from harness.record.run import Run
from harness.schema.manifest import MANIFEST, view
from harness.schema.manifest_view import Manifest
from tests.helpers import MODELED, synthetic_run

pytestmark = pytest.mark.core


@pytest.fixture(scope="module", params=["parquet", "csv"])
def written(request, tmp_path_factory):
    """(the run run_workload returned, its folder read back) for each table format."""
    from harness.sweeps.sweep import run_workload
    from harness.workload import load_workload

    root = tmp_path_factory.mktemp(request.param)
    (root / "w.yaml").write_text(MODELED + f"output: {root}\ntable_format: {request.param}\n")
    (run,) = run_workload(load_workload(root / "w.yaml"))
    return run, Run.read(run.path)


def test_a_folder_read_back_is_the_run_as_written(written):
    run, read = written
    assert read.manifest == run.manifest and read.manifest.complete
    assert (read.path, read.state, read.notes) == (run.path, run.state, run.notes)
    pd.testing.assert_frame_equal(read.summary, run.summary, check_exact=False, rtol=1e-15)
    assert json.dumps(read.result(), sort_keys=True) == json.dumps(run.result(), sort_keys=True)


def test_each_table_reads_the_same_whichever_format(written):
    run, _ = written
    requests = run.table("requests", ["request_id", "status"])
    assert len(requests) == 12 and set(requests.columns) == {"request_id", "status"}
    assert run.table("requests", ["request_id", "status"]) is requests  # read once
    finals = run.table("batches", ["kind", "step"], where=("kind", "final"))
    assert len(finals) and set(finals["kind"].astype(str)) == {"final"}


def test_a_missing_table_names_the_file(written, tmp_path):
    run, _ = written
    with pytest.raises(BadInput, match=r"no tokens table \(tokens\.parquet or tokens\.csv\)"):
        run.table("tokens")
    with pytest.raises(BadInput, match=rf"{run.table_path('steps')}: .*no column.*nonsense|"
                                       rf"{run.table_path('steps')}: unreadable"):
        run.table("steps", ["nonsense"])


def test_an_older_manifest_reads_its_absent_keys_as_none(tmp_path):
    """Only device and gil_mode: a manifest from before most keys were declared; its
    executor's kind and profile come from its text."""
    synthetic_run(tmp_path / "old", {"ttft.p99": (0.12, "s")})
    path = tmp_path / "old" / "manifest.json"
    manifest = json.loads(path.read_text())
    for key in ("executor_kind", "profile", "versions", "switch_interval_s"):
        manifest.pop(key, None)
    path.write_text(json.dumps(dict(manifest, executor="emulated:H200")))
    run = Run.read(tmp_path / "old")
    assert (run.manifest.executor_kind, run.manifest.profile) == ("emulated", "H200")
    assert run.manifest.versions is None and run.manifest.switch_interval_s is None
    assert run.value("ttft.p99") == 0.12


def test_the_view_has_every_declared_key_and_only_those():
    fields = set(Manifest.__dataclass_fields__)
    assert fields == {k.name for k in MANIFEST}
    typed = view({"gil_mode": "held", "surprise": 1, "executor": "modeled:B200"})
    assert (typed.gil_mode, typed.executor_kind, typed.profile, typed.ended) == \
        ("held", "modeled", "B200", None)
    with pytest.raises(AttributeError):
        typed.gil_mode = "released"  # type: ignore[misc]
