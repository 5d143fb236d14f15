"""Kernel tables (engine/kernels/; docs/modeling.md, "Kernel tables"): the format and its
errors, the interpolation rule by hand, the C++ curve against the Python one, and a
deployment's step timed from a table: each part from its kernels, a shape outside the rows
flagged."""

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given, settings, strategies as st

from engine import EngineConfig, LLMEngine, SchedulerConfig, _core
from engine.deployment import Deployment
from engine.devices.profile import DEVICES_DIR, load_device_profile
from engine.kernels import table
from engine.kernels.load import kernel_table
from engine.kernels.lookup import Curve
from engine.kernels.step import PARTS, find, part_kernels, step_terms
from engine.kernels.streams import decode_streams
from engine.model_config import load_model_config
from engine.plan import KIND_DECODE

pytestmark = pytest.mark.core

V3 = load_model_config("deepseek-v3")
V4 = load_model_config("deepseek-v4-flash")
FP8 = dict(attention="fp8", kv="fp8", dense="fp8", experts="fp8", dispatch="fp8",
           combine="bf16")
ROW = dict(mode="", precision="", context=0, n=0, k=0, heads=0, experts=0, topk=0, width=0,
           topology="", source="vendor")


def row(family, tokens, time_us, **keys):
    return table.Row(**{**ROW, "family": family, "tokens": tokens, "time_us": time_us, **keys})


def write_rows(path, rows):
    table.write(table.KernelTable("B200", "test 1.0", "hand-made", "none", rows), path)
    return path


def test_log_log_in_tokens_linear_in_context_by_hand():
    c = Curve.of([row("mla_decode", t, us, context=ctx) for t, ctx, us in (
        (1, 1000, 10.0), (16, 1000, 40.0), (1, 3000, 30.0), (16, 3000, 120.0))])
    # 4 tokens: a quarter of the log way from 1 to 16 -> 10 * 4^(log 4 / log 16) = 20
    assert c.at(4, 1000) == (pytest.approx(20.0), False)
    assert c.at(4, 3000) == (pytest.approx(60.0), False)
    assert c.at(4, 2000) == (pytest.approx(40.0), False)  # halfway in context
    assert c.at(0, 2000) == (0.0, False)


def test_outside_the_rows_is_flagged_and_follows_the_declared_rule():
    c = Curve.of([row("gemm", 2, 5.0), row("gemm", 8, 10.0)])
    assert c.at(1) == (5.0, True)  # below: the smallest shape's time
    assert c.at(32) == (pytest.approx(30.0), True)  # above: the last two rows' line
    assert c.at(8) == (10.0, False)
    flat = Curve.of([row("gemm", 2, 5.0), row("gemm", 8, 4.0)])
    assert flat.at(32) == (pytest.approx(16.0), True)  # a line that does not rise: in proportion
    two = Curve.of([row("mla_decode", 1, us, context=ctx) for ctx, us in ((100, 1.0),
                                                                          (200, 2.0))])
    assert two.at(1, 400) == (pytest.approx(4.0), True)  # the last two contexts' line
    assert two.at(1, 50) == (1.0, True)


@settings(max_examples=200, deadline=None)
@given(st.floats(0, 5000), st.floats(0, 9000))
def test_the_cpp_curve_is_the_python_curve(tokens, context):
    rows = [row("mla_decode", t, 3.0 + t * 0.7 + ctx * 0.01 + (t * ctx) ** 0.5, context=ctx)
            for t in (1, 4, 64, 1024) for ctx in (512, 2048, 8192)]
    py = Curve.of(rows)
    cpp = _core.KernelCurve([float(t) for t in py.tokens], [float(c) for c in py.contexts],
                            [t for r in py.times_us for t in r])
    us, outside = py.at(tokens, context)
    s, cpp_outside = cpp.seconds(tokens, context)
    assert s == pytest.approx(us * 1e-6, rel=1e-9)
    assert cpp_outside == outside


def test_a_table_round_trips_with_identical_bytes(tmp_path):
    rows = [row("gemm", t, 1.5 * t, precision="fp8", n=7168, k=2048) for t in (4, 1, 2)]
    a = write_rows(tmp_path / "a.csv", rows)
    b = write_rows(tmp_path / "b.csv", list(reversed(rows)))
    assert a.read_bytes() == b.read_bytes()
    back = table.read(a)
    assert sorted(r.tokens for r in back.rows) == [1, 2, 4]
    assert back.stack == "test 1.0"


@pytest.mark.parametrize("edit, message", [
    (lambda s: s.replace("gemm,", "gemmm,", 1), ":6: family 'gemmm' is not one of"),
    (lambda s: s.replace(",3,vendor", ",-3,vendor", 1), ":6: time_us must be a finite time"),
    (lambda s: s.replace(",3,vendor", ",x,vendor", 1), ":6: time_us 'x' is not float"),
    (lambda s: s.replace("# stack: test 1.0\n", ""), "no '# stack: ...' line"),
    (lambda s: s.replace("family,mode", "family,kind"), "expected the header"),
    (lambda s: s.replace(",vendor\n", ",guessed\n", 1), ":6: source 'guessed' is not one of"),
    (lambda s: s + "gemm,,fp8,1,0,7168,2048,0,0,0,0,,3\n", ":9: expected 14 fields"),
    (lambda s: s.replace("# profile", "# profiles"), ":1: expected '# key: value'"),
])
def test_a_malformed_table_names_the_line_and_what_was_expected(tmp_path, edit, message):
    path = write_rows(tmp_path / "t.csv", [row("gemm", t, 3.0, precision="fp8", n=7168,
                                               k=2048) for t in (1, 2, 4)])
    path.write_text(edit(path.read_text()))
    with pytest.raises(table.KernelTableError, match=message.replace("(", r"\(")):
        table.read(path)


def test_a_curve_that_is_not_a_full_grid_is_refused(tmp_path):
    path = write_rows(tmp_path / "t.csv", [row("mla_decode", 1, 1.0, context=100),
                                           row("mla_decode", 2, 1.0, context=100),
                                           row("mla_decode", 1, 1.0, context=200)])
    with pytest.raises(table.KernelTableError, match="not a full grid: context 200"):
        table.read(path)


# A table holding every kernel a DeepSeek-V3 deployment runs, each a curve whose time
# grows with tokens: the step's parts can then be checked against the curves by hand.
GRID, CONTEXTS = (1, 8, 64, 512, 4096), (1024, 8192)


def covering_table(d, scaleup=8, stack="test 1.0"):
    rows = []
    for kernels in part_kernels(V3, d, scaleup).values():
        for key, _ in kernels:
            keys = dict(zip(table.CURVE_KEYS, key))
            contexts = CONTEXTS if keys["family"] == "mla_decode" else (0,)
            rows += [row(**{**keys, "tokens": t, "context": c,
                            "time_us": 5.0 + 0.01 * t * (1 + c / 1024)})
                     for t in GRID for c in contexts]
    return table.KernelTable("B200", stack, "hand-made", "none", rows)


def profile_with_table(tmp_path, d, stack="test 1.0"):
    """B200's profile whose one kernel set is `covering_table(d, stack=stack)`."""
    table.write(covering_table(d, stack=stack), tmp_path / "k.csv")
    data = yaml.safe_load((DEVICES_DIR / "b200.yaml").read_text())
    data["kernels"] = {"test": {"table": "k.csv", "families": [], "source": "hand-made"}}
    path = tmp_path / "b200.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def deployment(**kw):
    return Deployment(devices=8, attention_dp=8, moe_ep=8, precision=dict(FP8), **kw)


def decode_step(tmp_path, d, rows=64, context=2048, stack="test 1.0"):
    path = profile_with_table(tmp_path, d, stack)
    cfg = EngineConfig(scheduler=SchedulerConfig(max_num_batched_tokens=65536,
                                                 num_kv_blocks=16384, block_size=64,
                                                 dp_size=8, max_num_seqs=512),
                       model="deepseek-v3", executor=f"modeled:{path}", precision="fp8",
                       deployment=d)
    engine = LLMEngine(cfg)
    for i in range(rows * 8):
        engine.add_request(i, prompt_len=context, max_new_tokens=8)
    while True:  # until every rank decodes all its rows in one step
        record = engine.step()
        if all(len(b.kind) == rows and (b.kind == KIND_DECODE).all() for b in record.batches):
            return record


def test_every_part_of_a_covered_deployment_is_timed_from_the_table():
    terms = step_terms(covering_table(deployment()), V3, deployment(), 8)
    assert set(terms.timed) == set(PARTS) - {"allreduce"}  # no TP group: no all-reduce
    assert terms.missing == {}


def test_a_kernel_a_model_never_runs_is_no_term():
    """DeepEP's benchmark layer: one MoE layer, no dense one (its dense FFN runs 0 times)."""
    layer = replace(V3, num_hidden_layers=1, first_k_dense_replace=0)
    terms = step_terms(covering_table(deployment()), layer, deployment(), 8)
    assert "dense" in terms.timed and len(terms.terms) == len(
        step_terms(covering_table(deployment()), V3, deployment(), 8).terms) - 2


def test_a_measured_tables_unfused_kernels_time_every_part():
    """The engine's own forward (steptrace calibrate) runs q_a and kv_a, gate and up apart,
    and its decode attention holds the absorbed products: such a table times the parts."""
    full = covering_table(deployment())
    fused = {(7168, 2112), (7168, 36864), (7168, 4096)}  # (k, n): q_a+kv_a, gate+up twice
    unfused = [replace(r, n=n) for r in full.rows if r.family == "gemm" and (r.k, r.n) in fused
               for n in {2112: (1536, 576), 36864: (18432,), 4096: (2048,)}[r.n]]
    rows = [r for r in full.rows if r.family != "mla_bmm" and
            not (r.family == "gemm" and (r.k, r.n) in fused)] + unfused
    terms = step_terms(replace(full, rows=rows), V3, deployment(), 8)
    assert set(terms.timed) == set(PARTS) - {"allreduce"} and terms.missing == {}
    whole = step_terms(full, V3, deployment(), 8)
    # q_a+kv_a and the two gate+up GEMMs each in two, the two absorbed products in none
    assert len(terms.terms) == len(whole.terms) + 3 - 2


def test_a_part_lacking_one_kernel_stays_a_roofline_and_says_which():
    full = covering_table(deployment())
    rows = [r for r in full.rows if not (r.family == "gemm" and r.n == 256)]  # the router
    terms = step_terms(replace(full, rows=rows), V3, deployment(), 8)
    assert "dense" not in terms.timed
    assert terms.missing["dense"] == "family=gemm, precision=bf16, n=256, k=7168"


def _experts_in_layouts(modes):
    """covering_table's rows, its experts timed only in `modes` ("" for one kernel beside
    every all-to-all), at the deployment's FP8 and, in the one kernel alone, at FP4."""
    full = covering_table(deployment())
    experts = [r for r in full.rows if r.family == "moe"]
    rows = [r for r in full.rows if r.family != "moe"]
    for mode in modes:
        rows += {replace(r, mode=mode) for r in experts}
    rows += {replace(r, mode="", precision="fp4") for r in experts}
    return replace(full, rows=sorted(rows, key=lambda r: (r.mode, r.precision, r.tokens)))


def test_the_experts_beside_deepep_are_read_in_its_layouts_alone():
    """A table with one grouped GEMM for every all-to-all (TensorRT-LLM's) times the experts
    by it; one with grouped GEMMs in DeepEP's layouts (SGLang's) never by its fused MoE,
    another deployment's kernel, so a precision it lacks there stays a roofline."""
    fp4 = deployment()
    fp4.precision["experts"] = "fp4"
    one_kernel = step_terms(_experts_in_layouts([""]), V3, fp4, 8)
    assert "experts" in one_kernel.timed and "experts" not in one_kernel.missing
    layouts = _experts_in_layouts(["low_latency", "normal"])
    assert "experts" in step_terms(layouts, V3, deployment(), 8).timed
    lacking = step_terms(layouts, V3, fp4, 8)
    assert "experts" not in lacking.timed
    assert lacking.missing["experts"].startswith("family=moe, mode=low_latency, precision=fp4")


def test_a_decode_steps_attention_is_the_sum_of_its_kernels(tmp_path):
    d = deployment()
    record = decode_step(tmp_path, d, rows=64)
    curves = {k: Curve.of(rs) for k, rs in covering_table(d).curves().items()}
    context = float(np.mean(record.batches[0].seqlen_k))
    count = {"tokens": 64, "decode_tokens": 64, "decode_rows": 64, "prefill_tokens": 0,
             "prefill_row": 0}
    expected = sum(curves[key].at(count[k.quantity], context)[0] * k.calls
                   for key, k in part_kernels(V3, d, 8)["attention"])
    cost = record.flops[0]
    assert cost.attention_s == pytest.approx(expected * 1e-6, rel=1e-9)
    assert cost.extrapolated == 0


def test_a_shape_past_the_rows_is_flagged_on_its_part(tmp_path):
    record = decode_step(tmp_path, deployment(), rows=16, context=9000)
    bits = record.flops[0].extrapolated
    assert bits & (1 << 0)  # attention: context 9000 past the rows' 8192
    assert not bits & (1 << 2)  # experts: 128 group tokens, within the rows


@pytest.mark.parametrize("graphs, host_us", [(True, 50), (False, 3500)])
def test_the_step_takes_the_stacks_host_cost_not_the_profiles_overhead(tmp_path, graphs,
                                                                       host_us):
    record = decode_step(tmp_path, deployment(cuda_graphs=graphs), rows=8)
    slowest = max(c.rank_s for c in record.flops)
    assert record.forward_ns * 1e-9 == pytest.approx(slowest + host_us * 1e-6, abs=1e-9)


def test_a_profiles_malformed_table_is_refused_before_anything_runs(tmp_path, capsys):
    from harness.commands import main

    path = write_rows(tmp_path / "k.csv", [row("gemm", 1, 3.0, precision="fp8", n=8, k=8)])
    path.write_text(path.read_text() + "gemm,,fp8,x,0,8,8,0,0,0,0,,3,vendor\n")
    data = yaml.safe_load((DEVICES_DIR / "b200.yaml").read_text())
    data["kernels"] = {"trtllm": {"table": "k.csv", "families": [], "source": "hand-made"}}
    (tmp_path / "b200.yaml").write_text(yaml.safe_dump(data))
    out = tmp_path / "results"
    assert main(["run", "workloads/validation/trtllm_latency_b200.yaml", "--set",
                 f"device=modeled:{tmp_path / 'b200.yaml'}", "--set", f"output={out}"]) == 2
    err = capsys.readouterr().err
    assert f"deployment.stack: B200's trtllm kernel table: {path}:7: tokens 'x' is not int" \
        in err
    assert not out.exists()


def test_the_same_table_and_seed_give_identical_steps(tmp_path):
    def steps():
        path = profile_with_table(tmp_path, deployment())
        cfg = EngineConfig(scheduler=SchedulerConfig(max_num_batched_tokens=2048,
                                                     num_kv_blocks=4096, block_size=64,
                                                     dp_size=8, max_num_seqs=64),
                           model="deepseek-v3", executor=f"modeled:{path}", precision="fp8",
                           deployment=deployment(), seed=7)
        engine = LLMEngine(cfg)
        for i in range(40):
            engine.add_request(i, prompt_len=100 + 37 * i, max_new_tokens=5 + i % 7)
        out = []
        for _ in range(30):
            r = engine.step()
            out.append((r.forward_ns, [(c.attention_s, c.experts_s, c.combine_s, c.extrapolated)
                                       for c in r.flops]))
        return out

    assert steps() == steps()


def test_a_run_says_what_its_step_was_timed_by(tmp_path, capsys):
    """The manifest's step_model, as `run --json` and `show` say it: the stack's tables,
    each part they lack a curve for and how it is timed instead."""
    import json

    from harness.commands import main

    assert main(["run", "workloads/validation/sglang_decode_h100.yaml", "--set",
                 f"output={tmp_path}", "--json"]) == 0
    run = json.loads(capsys.readouterr().out)["runs"][0]
    (note,) = [n for n in run["notes"] if n.startswith("modeled step:")]
    assert note == ("modeled step: sglang kernel tables (sglang 0.5.14; aiconfigurator-core "
                    "0.12.0 (NVIDIA)); by the link model: dispatch, combine (the manifest's "
                    "step_model names each curve the tables lack)")
    manifest = json.loads((Path(run["run_dir"]) / "manifest.json").read_text())
    model = manifest["step_model"]
    assert model["timed"] == ["attention", "dense", "experts"]
    # EP72 spans H100 nodes: no table has a cross-node all-to-all
    assert model["missing"]["dispatch"].endswith("width=72, topology=scaleout")


@pytest.mark.parametrize("model, timed", [("deepseek-v3", ["attention", "dense", "experts"]),
                                          ("deepseek-v4-flash", ["dense", "experts"])])
def test_roofline_tables_on_a_device_with_no_bf16_peak(model, timed):
    """The Ascend 950DT publishes FP8 and FP4 peaks only: MLA computes at the attention's
    precision, a BF16 router or LM head at the dense part's; V4's attention module has no
    roofline row, so that part stays the part roofline."""
    fp8 = dict(attention="fp8", kv="fp8", dense="fp8", experts="fp4", dispatch="fp8",
               combine="bf16")
    d = Deployment(devices=16, attention_dp=16, moe_ep=16, precision=fp8)
    cfg = EngineConfig(scheduler=SchedulerConfig(dp_size=16, num_kv_blocks=1024),
                       model=model, executor="modeled:Ascend 950DT", precision="fp8",
                       deployment=d)
    engine = LLMEngine(cfg)
    assert engine.executor.step_model["timed"] == timed
    engine.add_request(0, prompt_len=100, max_new_tokens=2)
    assert engine.step().forward_ns > 0


# DeepSeek-V4-Flash on the committed NVIDIA tables (engine/kernels/<profile>/<stack>.csv)

def v4_engine(device="B200", stack="trtllm", kv="fp8"):
    d = Deployment(devices=8, attention_dp=8, moe_ep=8, stack=stack,
                   precision={**FP8, "kv": kv})
    cfg = EngineConfig(scheduler=SchedulerConfig(max_num_batched_tokens=16384,
                                                 num_kv_blocks=16384, block_size=64,
                                                 dp_size=8, max_num_seqs=64),
                       model="deepseek-v4-flash", executor=f"modeled:{device}",
                       precision="fp8", deployment=d)
    return LLMEngine(cfg)


def test_a_v4_deployments_attention_is_timed_from_its_modules():
    """B200, TensorRT-LLM: each layer's attention module by its compress ratio, CSA on 21
    layers and HCA on 20 plus the 2 sliding-window ones, decode and prefill apart."""
    e = v4_engine()
    assert {"attention", "dense", "experts"} <= set(e.executor.step_model["timed"])
    assert "attention" not in e.executor.step_model["missing"]
    kernels = part_kernels(V4, e.config.deployment, 72)["attention"]
    assert sorted((k[0], k[1], kernel.calls, kernel.quantity) for k, kernel in kernels) == [
        ("v4_decode", "csa", 21, "decode_rows"), ("v4_decode", "hca", 22, "decode_rows"),
        ("v4_prefill", "csa", 21, "prefill_row"), ("v4_prefill", "hca", 22, "prefill_row")]


def test_a_v4_decode_steps_attention_is_its_modules_at_the_rows_and_their_context():
    e = v4_engine()
    for i in range(8 * 16):
        e.add_request(i, prompt_len=3000, max_new_tokens=8)
    while True:
        record = e.step()
        if all(len(b.kind) == 16 and (b.kind == KIND_DECODE).all() for b in record.batches):
            break
    context = float(np.mean(record.batches[0].seqlen_k))
    t = kernel_table(e.device_profile, "trtllm")
    expected = sum(find(t, family, mode=mode, precision="fp8", n=4096, heads=64).at(16, context)[0]
                   * calls for family, mode, calls in (("v4_decode", "csa", 21),
                                                       ("v4_decode", "hca", 22)))
    pdl = decode_streams("trtllm").layer_scale.value  # TensorRT-LLM's decode layers
    assert record.flops[0].attention_s == pytest.approx(pdl * expected * 1e-6, rel=1e-9)
    assert not record.flops[0].extrapolated & 1


@pytest.mark.parametrize("family, tokens, context", [("v4_decode", 3, 3000),
                                                     ("v4_prefill", 3000, 1000)])
def test_a_v4_module_is_looked_up_by_the_one_rule(family, tokens, context):
    """By hand from the B200 table's rows: log-log between the tokens around, linear between
    the contexts around."""
    t = kernel_table(load_device_profile("b200"), "trtllm")
    rows = [r for r in t.rows if (r.family, r.mode, r.heads) == (family, "csa", 8)]
    ts = sorted({r.tokens for r in rows})
    cs = sorted({r.context for r in rows})
    t0, t1 = max(x for x in ts if x <= tokens), min(x for x in ts if x > tokens)
    c0, c1 = max(x for x in cs if x <= context), min(x for x in cs if x > context)
    at = {(r.tokens, r.context): r.time_us for r in rows}

    def in_tokens(c):
        f = np.log(tokens / t0) / np.log(t1 / t0)
        return at[t0, c] * (at[t1, c] / at[t0, c]) ** f

    by_hand = in_tokens(c0) + (context - c0) / (c1 - c0) * (in_tokens(c1) - in_tokens(c0))
    curve = find(t, family, mode="csa", precision="fp8", n=4096, heads=8)
    assert curve.at(tokens, context) == (pytest.approx(by_hand, rel=1e-12), False)


@pytest.mark.parametrize("device, kv, lacking", [
    ("H200", "fp8", "family=v4_decode, mode=csa, precision=fp8, n=4096, heads=64"),
    ("B200", "bf16", "family=v4_decode, mode=csa, precision=bf16, n=4096, heads=64")])
def test_a_v4_attention_the_table_lacks_stays_a_roofline_and_says_which(device, kv, lacking):
    """TensorRT-LLM's V4 modules were collected on SM100 alone, every one at an FP8 KV
    cache."""
    model = v4_engine(device, kv=kv).executor.step_model
    assert "attention" not in model["timed"] and "dense" in model["timed"]
    assert model["missing"]["attention"] == lacking


@pytest.mark.parametrize("value, message", [
    ("torch", "deployment.stack: H800 has no torch kernel tables; it has: trtllm, sglang "
              "(or roofline)"),
    ("two words", "deployment.stack: expected one word of at most 64 characters or null"),
])
def test_a_stack_the_profile_lacks_is_refused_naming_what_it_has(value, message, capsys):
    from harness.commands import main

    assert main(["validate", "workloads/validation/ds_decode_h800.yaml", "--set",
                 f"deployment.stack={value}"]) == 2
    assert message in capsys.readouterr().err
