"""How a stack runs a decode step beyond its kernels' times (engine/kernels/streams.py;
docs/modeling.md, "Streams and launches"): TensorRT-LLM's shared experts on a second stream
beside the routed path under CUDA graphs, and its PDL discount on each layer's kernels; a
step with a prefill row, and a stack that declares neither, run their kernels in turn."""

from dataclasses import replace

import numpy as np
import pytest

from engine import EngineConfig, LLMEngine, SchedulerConfig, _core
from engine.kernels.lookup import Curve
from engine.kernels.step import PARTS, part_kernels
from engine.kernels.streams import DECODE_STREAMS, decode_streams
from engine.kernels.table import write
from engine.plan import KIND_DECODE
from tests.test_kernel_tables import V3, covering_table, decode_step, deployment, profile_with_table

pytestmark = pytest.mark.core

TRTLLM = "trtllm 1.3.0rc20"
PDL = DECODE_STREAMS["trtllm"].layer_scale.value


def parts(cost):
    return {p: getattr(cost, f"{p}_s") for p in PARTS}


def shared_experts_s(d, rows):
    """The shared experts' kernels by hand: covering_table's curves at the rank's tokens."""
    curves = {k: Curve.of(rs) for k, rs in covering_table(d).curves().items()}
    return sum(curves[key].at(rows)[0] * k.calls
               for key, k in part_kernels(V3, d, 8)["dense"] if k.aux) * 1e-6


def test_a_stack_is_known_by_its_tables_stack_lines_first_word():
    assert decode_streams(TRTLLM) is DECODE_STREAMS["trtllm"]
    assert decode_streams("sglang 0.5.14").shared_beside_routed is None
    assert decode_streams("").layer_scale.value == 1.0


def test_trtllm_hides_its_shared_experts_under_the_routed_path_in_a_decode_step(tmp_path):
    d = deployment()
    cost = decode_step(tmp_path, d, rows=64, stack=TRTLLM).flops[0]
    assert cost.aux_s == pytest.approx(PDL * shared_experts_s(d, 64), rel=1e-9)
    assert 0 < cost.aux_s < cost.dense_s
    routed = cost.experts_s + cost.dispatch_s + cost.combine_s
    assert cost.rank_s == pytest.approx(sum(parts(cost).values()) - min(cost.aux_s, routed),
                                        rel=1e-12)


def test_each_layers_kernels_take_the_pdl_discount_in_a_decode_step(tmp_path):
    (tmp_path / "plain").mkdir(), (tmp_path / "trtllm").mkdir()
    plain = decode_step(tmp_path / "plain", deployment(), rows=64).flops[0]
    trtllm = decode_step(tmp_path / "trtllm", deployment(), rows=64, stack=TRTLLM).flops[0]
    for part in ("attention", "experts", "dispatch", "combine"):
        assert getattr(trtllm, f"{part}_s") == pytest.approx(PDL * getattr(plain, f"{part}_s"),
                                                             rel=1e-12)
    # the LM head runs once a step, outside the layers: the dense part is discounted less
    assert PDL * plain.dense_s < trtllm.dense_s < plain.dense_s


def test_without_cuda_graphs_the_shared_experts_run_in_turn_and_pdl_still_applies(tmp_path):
    (tmp_path / "plain").mkdir(), (tmp_path / "trtllm").mkdir()
    plain = decode_step(tmp_path / "plain", deployment(cuda_graphs=False), rows=64).flops[0]
    cost = decode_step(tmp_path / "trtllm", deployment(cuda_graphs=False), rows=64,
                       stack=TRTLLM).flops[0]
    assert cost.aux_s == 0
    assert cost.rank_s == pytest.approx(sum(parts(cost).values()), rel=1e-12)
    assert cost.attention_s == pytest.approx(PDL * plain.attention_s, rel=1e-12)


def test_two_micro_batches_hide_the_shared_experts_under_the_experts_alone(tmp_path):
    cost = decode_step(tmp_path, deployment(micro_batches=2), rows=64, stack=TRTLLM).flops[0]
    compute = cost.attention_s + cost.dense_s + cost.experts_s
    comm = cost.dispatch_s + cost.combine_s + cost.allreduce_s
    assert cost.aux_s > 0
    assert cost.rank_s == pytest.approx(max(compute - min(cost.aux_s, cost.experts_s), comm),
                                        rel=1e-12)


def engine_on(tmp_path, stack, **scheduler):
    """An 8-rank engine timed by covering_table under `stack`, in a folder of its own."""
    folder = tmp_path / stack.split()[0]
    folder.mkdir()
    path = profile_with_table(folder, deployment(), stack)
    cfg = EngineConfig(scheduler=SchedulerConfig(max_num_batched_tokens=8192,
                                                 num_kv_blocks=4096, block_size=64,
                                                 dp_size=8, max_num_seqs=64, **scheduler),
                       model="deepseek-v3", executor=f"modeled:{path}", precision="fp8",
                       deployment=deployment())
    return LLMEngine(cfg)


def test_a_step_with_a_prefill_row_runs_every_kernel_in_turn_on_every_stack(tmp_path):
    def first_step(stack):
        engine = engine_on(tmp_path, stack)
        for i in range(16):
            engine.add_request(i, prompt_len=700, max_new_tokens=4)
        return engine.step()

    plain, trtllm = first_step("test 1.0"), first_step(TRTLLM)
    assert trtllm.forward_ns == plain.forward_ns
    assert [parts(c) for c in trtllm.flops] == [parts(c) for c in plain.flops]
    assert all(c.aux_s == 0 for c in trtllm.flops)


def test_one_ranks_prefill_row_has_every_rank_run_its_kernels_in_turn(tmp_path):
    """The rule is the step's: a rank that only decodes, in a step where another rank
    prefills, takes neither the discount nor the second stream."""
    def mixed_step(stack):
        engine = engine_on(tmp_path, stack, mixed_batches=True)
        for i in range(16):
            engine.add_request(i, prompt_len=300, max_new_tokens=16)
        while not all(len(b.kind) and (b.kind == KIND_DECODE).all()
                      for b in engine.step().batches):
            pass
        engine.add_request(99, prompt_len=300, max_new_tokens=4)  # one rank's prefill
        record = engine.step()
        kinds = [set(b.kind.tolist()) for b in record.batches]
        assert sum(k != {KIND_DECODE} for k in kinds) == 1  # one rank prefills, 7 decode
        assert all(KIND_DECODE in k for k in kinds)
        return record

    plain, trtllm = mixed_step("test 1.0"), mixed_step(TRTLLM)
    assert [parts(c) for c in trtllm.flops] == [parts(c) for c in plain.flops]
    assert all(c.aux_s == 0 for c in trtllm.flops)


def test_the_manifest_says_how_the_stack_runs_a_decode_step(tmp_path):
    path = profile_with_table(tmp_path, deployment(), TRTLLM)
    cfg = EngineConfig(scheduler=SchedulerConfig(dp_size=8, num_kv_blocks=1024),
                       model="deepseek-v3", executor=f"modeled:{path}", precision="fp8",
                       deployment=deployment())
    streams = LLMEngine(cfg).executor.step_model["decode_streams"]
    assert streams["shared_beside_routed"].startswith("TensorRT-LLM's DeepseekV3MoE")
    assert streams["layer_scale"] == dict(value=PDL, kind="assumption",
                                          source=DECODE_STREAMS["trtllm"].layer_scale.source)


def test_a_prompt_engine_and_untimed_shared_experts_claim_no_decode_streams(tmp_path):
    """A P/D prefill pool's prompt engine never decodes; a dense part the table lacks stays
    a roofline, with no second stream for the note to claim."""
    def step_model(folder, rows=None, **scheduler):
        folder.mkdir()
        d = deployment()
        table = covering_table(d, stack=TRTLLM)
        if rows is not None:
            table = replace(table, rows=[r for r in table.rows if rows(r)])
        path = profile_with_table(folder, d, TRTLLM)
        write(table, folder / "k.csv")  # the profile's table, as edited
        cfg = EngineConfig(scheduler=SchedulerConfig(dp_size=8, num_kv_blocks=1024,
                                                     **scheduler),
                           model="deepseek-v3", executor=f"modeled:{path}", precision="fp8",
                           deployment=d)
        return LLMEngine(cfg).executor.step_model

    assert "decode_streams" not in step_model(tmp_path / "p", engine_type="prompt")
    router = step_model(tmp_path / "r", rows=lambda r: not (r.family == "gemm" and r.n == 256))
    assert "dense" not in router["timed"]
    assert router["decode_streams"]["shared_beside_routed"] is None
    assert router["decode_streams"]["layer_scale"]["value"] == PDL  # the tables' other parts


@pytest.mark.parametrize("scale", [0.0, -0.5, 1.5, np.nan])
def test_a_layer_scale_outside_zero_to_one_is_refused(scale):
    with pytest.raises(ValueError, match="decode_layer_scale must be in"):
        _core.KernelStep([], 1, 0.0, scale)


def test_a_runs_note_says_how_its_decode_steps_were_run(tmp_path, capsys):
    import json

    from harness.commands import main

    assert main(["run", "workloads/ci_gate.yaml", "--set", f"output={tmp_path}",
                 "--json"]) == 0
    (note,) = [n for n in json.loads(capsys.readouterr().out)["runs"][0]["notes"]
               if n.startswith("modeled step:")]
    assert "; decode steps: shared experts beside the routed path, each layer's kernels at " \
           "0.9 of their time (PDL, assumption)" in note
