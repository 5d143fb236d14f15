"""Cross-language contracts: each is declared once, and every side that restates it is
enumerated here, so a field added on one side only fails."""

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest

from engine import _core, scheduler_config
from engine.config import SchedulerConfig
from engine.deployment import Deployment
from engine.executors import modeled
from engine.flops import FlopsEstimator
from engine.model_config import ModelConfig, load_model_config
from engine.scheduler_config import FIELDS, stub
from harness.workload.schema import SCHEMA, PoolEngine

pytestmark = pytest.mark.core

REPO = Path(__file__).resolve().parents[1]
# ModelConfig fields only the torch model reads: the C++ cost model has no use for them.
TORCH_ONLY = {"rope_theta", "rms_norm_eps", "routed_scaling_factor", "max_position_embeddings",
              "source"}


def struct_members(header: str, struct: str) -> list:
    body = re.search(rf"struct {struct} {{(.*?)\n}};", (REPO / "csrc" / header).read_text(), re.S)
    return re.findall(r"^  [\w:<>]+ (\w+)(?: = [^;]+)?;", body.group(1), re.M)


def test_the_core_table_covers_the_struct():
    assert [f["name"] for f in FIELDS] == struct_members("config.hpp", "SchedulerConfig")


def test_the_python_class_is_the_core_table():
    got = [(f.name, f.default) for f in dataclasses.fields(SchedulerConfig)]
    assert got == [(f["name"], f["default"]) for f in FIELDS]


# The workload derives num_kv_blocks from device memory by default (docs/workloads.md).
WORKLOAD_DEFAULTS = {"num_kv_blocks": "auto"}


def test_the_workload_schema_is_the_core_table():
    assert [(k, v.default) for k, v in SCHEMA["engine"].items()] == \
        [(f["name"], WORKLOAD_DEFAULTS.get(f["name"], f["default"])) for f in FIELDS]


def docs_section(name: str) -> str:
    return (REPO / "docs" / "workloads.md").read_text().split(f"## {name}")[1].split("\n## ")[0]


def shown(v) -> str:
    """A default as docs/workloads.md writes it."""
    return "null" if v is None else str(v).lower() if isinstance(v, bool) else str(v)


def test_the_docs_table_is_the_core_table():
    rows = re.findall(r"^\| `(\w+)` \| `([^`]*)` \|", docs_section("engine"), re.M)
    assert rows == [(f["name"], shown(WORKLOAD_DEFAULTS.get(f["name"], f["default"])))
                    for f in FIELDS]


def test_the_stub_is_regenerated():
    """Regenerate: see engine/scheduler_config.py."""
    assert Path(scheduler_config.__file__).with_suffix(".pyi").read_text() == stub()


@pytest.mark.parametrize("name, value, message", [
    ("lookahead_slots", -1, "lookahead_slots must be >= 0, got -1"),  # not the core's None
    ("num_kv_blocks", 2**31, "num_kv_blocks must be a 32-bit integer, got 2147483648"),
    ("overlap", None, "overlap must be a bool, got None"),
    ("dp_assign", 3, "dp_assign must be one of round_robin, least_loaded, cache_aware, "
     "session_affinity; got 3"),
])
def test_the_core_checks_every_value_once(name, value, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        SchedulerConfig(**{name: value})


def test_lookahead_is_the_cores():
    assert SchedulerConfig().lookahead == 1
    assert SchedulerConfig(num_mtp=2, overlap=True).lookahead == 6
    assert SchedulerConfig(engine_type="prompt").lookahead == 0
    assert SchedulerConfig(engine_type="prompt", lookahead_slots=3).lookahead == 3


def test_the_cost_model_reads_model_config_fields():
    read = _core.model_geometry_fields()
    assert read == struct_members("cost_model.hpp", "ModelGeometry")
    python = {f.name for f in dataclasses.fields(ModelConfig)}
    assert set(read) <= python, f"ModelConfig lacks {set(read) - python}"
    assert python - set(read) == TORCH_ONLY, \
        "a ModelConfig field is neither read by csrc/cost_model.hpp nor in TORCH_ONLY"


def test_the_built_class_behaves_as_a_dataclass_statement():
    import pickle
    config = SchedulerConfig(num_mtp=1)
    assert pickle.loads(pickle.dumps(config)) == config
    assert dataclasses.replace(config, overlap=True).lookahead == 4
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.num_mtp = 2


def schema_defaults(section: dict, prefix: str = ""):
    """(dotted key, default) of every key of a workload schema section, in order."""
    for name, spec in section.items():
        if isinstance(spec, PoolEngine):  # engine keys over the workload's: none given, {}
            yield f"{prefix}{name}", {}
        elif isinstance(spec, dict):
            yield from schema_defaults(spec, f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}", spec.default


PD_KEYS = ("prefill", "decode", "kv_transfer", "router")


def test_the_workload_schema_is_the_deployment_class():
    """The co-located keys, then each pool's: its own three and the co-located ones."""
    declared = [(s.key, default) for s, default in Deployment.settings()]
    section = SCHEMA["deployment"]
    colocated = {k: v for k, v in section.items() if k not in PD_KEYS}
    assert list(schema_defaults(colocated)) == declared
    for role in ("prefill", "decode"):
        pool = list(schema_defaults(section[role]))
        assert [k for k, _ in pool[:3]] == ["instances", "device", "engine"]
        assert pool[3:] == declared


def test_the_docs_pd_table_is_the_schema():
    """docs/workloads.md's P/D table: a row may name both pools' key."""
    text = docs_section("deployment").split("### P/D pools")[1]
    rows = []
    for names, default in re.findall(r"^\| (`[^|]*) \| `([^`]*)` \|", text, re.M):
        rows += [(k, default) for k in re.findall(r"`([\w.]+)`", names)]
    section = SCHEMA["deployment"]
    expected = [(f"{role}.{k}", shown(d)) for k in ("instances", "device", "engine")
                for role in ("prefill", "decode")
                for d in [dict(schema_defaults(section[role]))[k]]]
    expected += [(k, shown(d)) for name in ("kv_transfer", "router")
                 for k, d in schema_defaults(section[name], f"{name}.")]
    assert rows == expected


def test_the_docs_table_is_the_deployment_class():
    """A row may name several keys: `precision.attention`, `.dense`, `.experts`."""
    rows = []
    colocated = docs_section("deployment").split("\n### ")[0]
    for names, default in re.findall(r"^\| (`[^|]*) \| `([^`]*)` \|", colocated, re.M):
        first, *more = re.findall(r"`([\w.]+)`", names)
        rows += [(first, default)] + [(first.rpartition(".")[0] + k, default) for k in more]
    assert rows == [(s.key, shown(default)) for s, default in Deployment.settings()]


def test_a_workload_without_deployment_keys_is_the_default_deployment():
    """from_values resolves every null to the class's default (at the default precision)."""
    def values(section):
        return {k: values(v) if isinstance(v, dict) else v.default for k, v in section.items()}
    colocated = {k: v for k, v in SCHEMA["deployment"].items() if k not in PD_KEYS}
    assert Deployment.from_values(values(colocated), SCHEMA["precision"].default) \
        == Deployment()


def test_every_deployment_rate_is_filled_from_python():
    """DeploymentRates has no defaults that matter: deployment_rates sets every member, and
    the model refuses a struct left unfilled."""
    source = Path(modeled.__file__).read_text()
    assert [m for m in struct_members("deployment_model.hpp", "DeploymentRates")
            if not re.search(rf"\br\.{m}\b", source)] == []
    cost = FlopsEstimator(load_model_config("deepseek-v3")).cost_model()
    with pytest.raises(ValueError, match="deployment devices must be > 0, got 0"):
        _core.ModeledStep(cost, _core.DeploymentRates(), _core.Roofline(0, 0, 0, 0), mtp=False,
                          acceptance=0.0, rng_state=np.random.default_rng(0).bit_generator.state)
