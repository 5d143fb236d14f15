"""A run's manifest.json holds to its declaration (harness/schema/manifest.py): every key
a run writes is declared, every key declared for every run is there, and each value is of
its declared JSON kind; docs/tables.md renders the same declaration."""

import json

import pytest

from harness.schema.manifest import KEYS, MANIFEST, executor_of
from tests.helpers import pd_runs
from tests.test_tables_schema import TINY

KINDS = {"string": str, "boolean": bool, "object": dict, "array": list,
         "null": type(None), "integer": int, "number": (int, float)}


def kind_errors(manifest: dict, written: set) -> list:
    """What breaks the declaration in `manifest`, where the keys of `written` (the `when`
    of the declared keys this run writes) apply."""
    errors = [f"{k}: not declared" for k in manifest if k not in KEYS]
    errors += [f"{k.name}: missing" for k in MANIFEST
               if (not k.when or k.when in written) and k.name not in manifest]
    for name, value in manifest.items():
        declared = KEYS.get(name)
        if declared is None:
            continue
        ok = any(isinstance(value, KINDS[kind]) and not (kind in ("integer", "number")
                                                         and isinstance(value, bool))
                 for kind in declared.kinds)
        if not ok:
            errors.append(f"{name}: {type(value).__name__}, declared {declared.kinds}")
    return errors


@pytest.fixture(scope="module")
def colocated(tmp_path_factory):
    from harness.sweeps.sweep import run_workload
    from harness.workload import load_workload

    root = tmp_path_factory.mktemp("manifest")
    path = root / "w.yaml"
    path.write_text(f"output: {root / 'results'}\n{TINY}")
    (run,) = run_workload(load_workload(path))
    run_dir = run.path
    return json.loads((run_dir / "manifest.json").read_text())


def test_a_modeled_runs_manifest_is_the_declared_one(colocated):
    assert kind_errors(colocated, {"a run that ended"}) == []
    assert (colocated["executor_kind"], colocated["profile"]) == ("modeled", "B200")


def test_a_pd_runs_manifest_is_the_declared_one(tmp_path):
    (run_dir,) = pd_runs(tmp_path)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert kind_errors(manifest, {"a run that ended", "a P/D deployment's run"}) == []


def test_a_key_not_declared_or_of_another_kind_is_found(colocated):
    assert kind_errors(dict(colocated, surprise=1), {"a run that ended"}) == \
        ["surprise: not declared"]
    broken = dict(colocated, trace_rows="200")
    del broken["started"]
    assert kind_errors(broken, {"a run that ended"}) == [
        "started: missing", "trace_rows: str, declared ('integer',)"]


def test_the_executor_is_read_from_its_keys_or_from_an_older_manifests_text():
    assert executor_of({"executor": "modeled:B200", "executor_kind": "modeled",
                        "profile": "B200"}) == ("modeled", "B200")
    assert executor_of({"executor": "emulated:../h200.yaml"}) == ("emulated", "../h200.yaml")
    assert executor_of({"executor": "torch"}) == ("torch", None)


def test_the_typed_view_is_generated_from_the_declaration():
    """harness/schema/manifest_view.py is what `python -m harness.schema.manifest` writes."""
    from harness.schema.manifest import VIEW, view_source

    assert VIEW.read_text() == view_source(), \
        "harness/schema/manifest_view.py is stale: python -m harness.schema.manifest"
