"""A workload's typed views (harness/workload/views.py): one frozen dataclass per SCHEMA
section, every key of SCHEMA a field and no other, each holding the loaded value, and the
stub that types them for mypy regenerated."""

import dataclasses
import pickle
from pathlib import Path

import pytest

from harness.workload import Workload, load_workload, views as views_module
from harness.workload.schema import SCHEMA, Key, NullableSection, PoolEngine, integer
from harness.workload.views import VIEWS, class_name, stub, views

pytestmark = pytest.mark.core  # loads workloads: the engine's checks run

REPO = Path(__file__).resolve().parents[1]
# a co-located modeled workload, a P/D one, a torch device's, one with a shared prefix
WORKLOADS = ("ci_gate", "pd_azure_code_h800", "quickstart", "prefix_caching")


def schema_sections(schema, path=()):
    """(key path, section) of every section of a schema, a P/D pool's engine as `engine:`."""
    yield path, schema
    for name, spec in schema.items():
        if isinstance(spec, dict) and not isinstance(spec, PoolEngine):
            yield from schema_sections(spec, path + (name,))


def plain(view):
    """A view back to the mapping it was made from."""
    return dataclasses.asdict(view) if dataclasses.is_dataclass(view) else view


def test_every_section_has_a_view_of_exactly_its_keys():
    seen = dict(schema_sections(SCHEMA))
    assert set(VIEWS) == set(seen)
    for path, section in seen.items():
        assert [f.name for f in dataclasses.fields(VIEWS[path])] == list(section), path


def test_a_key_added_to_the_schema_is_in_its_view_and_the_stub():
    load = {**SCHEMA["load"], "burst": Key(integer(1), 4, "requests released at once")}
    schema = {**SCHEMA, "load": load}
    assert [f.name for f in dataclasses.fields(views(schema)[("load",)])] == \
        ["mode", "concurrency", "sessions", "burst"]
    assert "    burst: int\n" in stub(schema)
    assert stub(schema) != stub()


def test_the_stub_is_regenerated():
    """Regenerate: see harness/workload/views.py."""
    assert Path(views_module.__file__).with_suffix(".pyi").read_text() == stub()


@pytest.mark.parametrize("name", WORKLOADS)
def test_the_views_hold_the_loaded_values(name):
    w = load_workload(REPO / "workloads" / f"{name}.yaml")
    assert {key: plain(getattr(w, key)) for key in SCHEMA} == w.values
    for key, spec in SCHEMA.items():
        if isinstance(spec, dict) and w.values[key] is not None:  # a nullable one: None
            assert type(getattr(w, key)).__name__ == class_name((key,))


def test_a_section_left_out_is_null_and_a_pool_engine_is_an_engine():
    colocated = load_workload(REPO / "workloads" / "ci_gate.yaml")
    assert colocated.deployment.prefill is None and colocated.deployment.router is None
    pd = load_workload(REPO / "workloads" / "pd_azure_code_h800.yaml")
    assert pd.trace.generate is None and pd.trace.file is not None
    assert type(pd.deployment.prefill.engine) is VIEWS[("engine",)]
    assert pd.deployment.prefill.engine.max_num_batched_tokens == 16384
    assert pd.deployment.prefill.engine.engine_type == "prompt"
    nullable = [path for path, s in schema_sections(SCHEMA) if isinstance(s, NullableSection)]
    assert nullable == [("trace", "generate"), ("trace", "generate", "sessions"), ("target",),
                        ("deployment", "prefill"), ("deployment", "decode"), ("deployment", "kv_transfer"),
                        ("deployment", "router")]


def test_a_workload_is_frozen_pickles_and_keeps_its_keys_apart_from_its_own_fields():
    w = load_workload(REPO / "workloads" / "ci_gate.yaml")
    with pytest.raises(dataclasses.FrozenInstanceError):
        w.load.concurrency = 4
    assert pickle.loads(pickle.dumps(w)) == w
    own = {f.name for f in dataclasses.fields(Workload)} - set(SCHEMA)
    assert own == {"path", "values", "notes", "trace_read"}
