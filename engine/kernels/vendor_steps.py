"""NVIDIA aiconfigurator-core 0.12.0's own step estimates for DeepSeek-V3 (and V4-Flash) served
with attention DP 8 and MoE EP 8 on one node: the step steptrace's modeled step is checked
against (workloads/validation/kernels/aiconfigurator_steps.csv, _v4.csv). Regenerate them with

    python -m engine.kernels.vendor_steps --out workloads/validation/kernels/aiconfigurator_steps.csv
    python -m engine.kernels.vendor_steps --model deepseek-v4-flash \
        --out workloads/validation/kernels/aiconfigurator_steps_v4.csv

in an environment holding aiconfigurator-core 0.12.0 (imported here only when run).

aiconfigurator builds one rank's op graph (sdk/models/deepseek.py, deepseek_v4.py) and its
compiled engine
times each op from NVIDIA's collected tables. A part is one op of that graph over all layers
(its scale factor), in ms, named without its phase prefix. The parts sum to step_ms: an
OverlapOp's two streams are listed op by op and part_overlap_hidden (<= 0) takes back the
shorter stream. trtllm's large-EP decode ops carry its PDL discount (pdl_factor) already.

The MoE regime is chosen as aiconfigurator's task enumerator chooses it: per phase, the first
all-to-all backend whose comm and expert-compute tables cover EP 8 on the system's node width;
unless both phases are covered the graph stays fused (moe_comm "fused"): V4's always is (no
expert-compute table covers its shape).

DeepSeek-V4-Flash: the FP8 checkpoint (sgl-project/DeepSeek-V4-Flash-FP8) on every device, the
one whose attention modules were collected; TensorRT-LLM at aiconfigurator's `next` version
(1.3.0rc23), the only one with them, and only on SM100: its SM90 rows are left out.
"""

from __future__ import annotations

import argparse
import csv
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple

VERSION = "0.12.0"
ATTENTION_DP = MOE_EP = 8
# steptrace model -> aiconfigurator's model path
MODELS = {"deepseek-v3": "deepseek-ai/DeepSeek-V3",
          "deepseek-v4-flash": "sgl-project/DeepSeek-V4-Flash-FP8"}
# steptrace profile -> aiconfigurator system, and the GEMM and expert precision its tables
# hold for DeepSeek-V3 (SM100: NVFP4; SM90: FP8 with 128-wide block scales)
DEVICES = {"B200": ("b200_sxm", "nvfp4"), "GB200": ("gb200", "nvfp4"),
           "B300": ("b300_sxm", "nvfp4"), "H100": ("h100_sxm", "fp8_block"),
           "H200": ("h200_sxm", "fp8_block")}
# the aiconfigurator version each stack is estimated at, per model
STACK_VERSIONS = {"deepseek-v3": {"trtllm": "current", "sglang": "current"},
                  "deepseek-v4-flash": {"trtllm": "next", "sglang": "current"}}
KV_CACHE = "fp8"
# attention math: the precision each stack's MLA tables were collected in (trtllm's and the
# fused sglang graph's MLA rows are bf16; sglang's large-EP MLA module rows fp8_block)
FMHA = {("trtllm", True): "bfloat16", ("trtllm", False): "bfloat16",
        ("sglang", True): "fp8_block", ("sglang", False): "bfloat16"}
REQUIRED_STACK, OTHER_STACKS = "trtllm", ("sglang",)
DECODE_SEQUENCES = (1, 2, 3, 4, 8, 16, 24, 32, 64, 96, 128, 192, 256)
DECODE_CONTEXTS = (1024, 2048, 3000, 4096, 6000, 8192)
PREFILL_LENGTHS = (1024, 2048, 3000, 4096, 6000, 8192)
PREFILL_BATCHES = (1, 2, 3, 4, 8, 16)
PREFILL_MAX_TOKENS = 16384
COLUMNS = ("device", "stack", "phase", "attention_dp", "moe_ep", "precision_gemm",
           "precision_moe", "precision_kv", "sequences_per_gpu", "context",
           "prompt_tokens_per_gpu", "step_ms", "precision_fmha", "moe_comm", "pdl_factor")
NOTICE = ("# source: aiconfigurator-core 0.12.0 (NVIDIA, Apache-2.0), its compiled engine over "
          "its collected tables; engine/kernels/vendor_steps.py\n")


def load_aiconfigurator(model: str = "deepseek-v3"):
    """The aiconfigurator-core modules this script calls, with `model`'s config; exits with one
    line without 0.12.0."""
    from importlib import metadata
    try:
        found = metadata.version("aiconfigurator-core")
    except metadata.PackageNotFoundError:
        sys.exit(f"vendor_steps: aiconfigurator-core is not installed; needs {VERSION} "
                 f"(pip install aiconfigurator-core=={VERSION})")
    if found != VERSION:
        sys.exit(f"vendor_steps: needs aiconfigurator-core {VERSION}, found {found}")
    import logging

    import aiconfigurator_core
    from aiconfigurator_core.sdk import common, engine, perf_database
    from aiconfigurator_core.sdk.config import ModelConfig
    from aiconfigurator_core.sdk.models import get_model
    from aiconfigurator_core.sdk.operations import OverlapOp, moe_comm
    from aiconfigurator_core.sdk.utils import get_model_config_from_model_path
    logging.getLogger("aiconfigurator_core").setLevel(logging.ERROR)  # its per-load notes
    return argparse.Namespace(core=aiconfigurator_core, common=common, engine=engine,
                              perf_database=perf_database, ModelConfig=ModelConfig,
                              get_model=get_model, OverlapOp=OverlapOp, moe_comm=moe_comm,
                              model=MODELS[model],
                              model_info=get_model_config_from_model_path(MODELS[model]))


def comm_backends(aic, db, stack: str, moe_quant) -> Dict[str, str]:
    """{phase: all-to-all backend} when both phases can run large EP at MOE_EP, else {}:
    the upper aiconfigurator's Task._resolve_moe_comm_backend over the same coverage probes."""
    info, spec = aic.model_info, db.system_spec
    nodes = aic.moe_comm.nodes_for(MOE_EP, spec["node"]["num_gpus_per_node"])
    chosen = {}
    for phase in ("context", "generation"):
        a2a = db.moe_a2a_coverage(info["hidden_size"], info["topk"], info["num_experts"],
                                  moe_quant, phase)
        compute = db.moe_expert_compute_coverage(info["hidden_size"], info["moe_inter_size"],
                                                 info["topk"], info["num_experts"], moe_quant,
                                                 phase)
        for name, backend in aic.moe_comm.MOE_A2A_BACKENDS.items():
            if (stack in backend.frameworks and phase in backend.inference_phases
                    and MOE_EP in compute and (MOE_EP, nodes) in a2a.get(name, ())
                    and backend.feasible(topk=info["topk"], num_experts=info["num_experts"],
                                         moe_tp_size=1, moe_ep_size=MOE_EP,
                                         sm_version=spec["gpu"]["sm_version"])):
                chosen[phase] = name
                break
    return chosen if len(chosen) == 2 else {}


@dataclass
class Engine:
    """One compiled aiconfigurator engine: one device, stack and precision."""

    aic: argparse.Namespace
    model: Any  # aiconfigurator's DeepSeekModel
    handle: Any  # its EngineHandle
    stack: str  # "trtllm 1.3.0rc20"
    comm: Dict[str, str]  # {phase: all-to-all backend}, {} on the fused graph
    fmha: str


def compile_engine(aic, system: str, stack: str, precision: str,
                   version: str = "current") -> Engine:
    db = aic.perf_database.get_database(system, stack, version)
    if db is None:
        raise RuntimeError(f"aiconfigurator has no {stack} tables for {system}")
    comm = comm_backends(aic, db, stack, aic.common.MoEQuantMode[precision])
    fmha = FMHA[stack, bool(comm)]
    config = aic.ModelConfig(
        tp_size=1, pp_size=1, attention_dp_size=ATTENTION_DP, moe_tp_size=1, moe_ep_size=MOE_EP,
        gemm_quant_mode=aic.common.GEMMQuantMode[precision],
        moe_quant_mode=aic.common.MoEQuantMode[precision],
        kvcache_quant_mode=aic.common.KVCacheQuantMode[KV_CACHE],
        fmha_quant_mode=aic.common.FMHAQuantMode[fmha], system=system)
    if comm:
        config.moe_comm_backend = comm
        config.num_gpus_per_node = db.system_spec["node"]["num_gpus_per_node"]
    model = aic.get_model(aic.model, config, stack)
    spec = aic.engine.build_engine_spec_json(
        model, model_path=aic.model, system=system, backend=stack, backend_version=db.version,
        kv_block_size=None, systems_path=db.systems_root, nextn=0, database=db)
    handle = aic.engine.EngineHandle(aic.core.engine_spec_bincode_from_json(spec),
                                     systems_path=db.systems_root)
    return Engine(aic, model, handle, f"{stack} {db.version}", comm, fmha)


def parts(eng: Engine, entries: Sequence[tuple], ops: Sequence[Any],
          evaluate) -> Dict[str, float]:
    """Per-op ms by name without its phase prefix; an OverlapOp's streams op by op, and the
    time its shorter stream hides as `overlap_hidden`."""
    overlaps = {op._name: op for op in ops if isinstance(op, eng.aic.OverlapOp)}
    out: Dict[str, float] = {}

    def add(name: str, ms: float) -> None:
        key = name.split("_", 1)[1] if name.startswith(("context_", "generation_")) else name
        out[key] = out.get(key, 0.0) + ms

    for name, ms, *_ in entries:
        if name not in overlaps:
            add(name, ms)
            continue
        inner = evaluate([*overlaps[name]._group_a, *overlaps[name]._group_b])
        for inner_name, inner_ms, *_ in inner:
            add(inner_name, inner_ms)
        add("overlap_hidden", ms - sum(e[1] for e in inner))
    return out


def decode_step(eng: Engine, sequences: int, context: int) -> Tuple[float, Dict[str, float]]:
    """One decode step of `sequences` sequences per GPU, each attending over `context` keys:
    aiconfigurator's s = isl + osl // 2 + 1 is the KV length, so isl = context - 1, osl = 1."""
    entries = eng.handle.decode_step_per_op(sequences, context - 1, 1)
    evaluate = lambda ops: eng.handle.evaluate_ops_json(
        eng.aic.engine.build_ops_json(ops), is_context=False, batch_size=sequences, s=context)
    return sum(e[1] for e in entries), parts(eng, entries, eng.model.generation_ops, evaluate)


def prefill_step(eng: Engine, sequences: int, length: int) -> Tuple[float, Dict[str, float]]:
    """One prefill step of `sequences` whole prompts of `length` tokens per GPU."""
    entries, _ = eng.handle.run_static_per_op(batch_size=sequences, isl=length, osl=1,
                                              mode="static_ctx")
    evaluate = lambda ops: eng.handle.evaluate_ops_json(
        eng.aic.engine.build_ops_json(ops), is_context=True, batch_size=sequences, s=length)
    return sum(e[1] for e in entries), parts(eng, entries, eng.model.context_ops, evaluate)


def pdl_factor(eng: Engine, phase: str) -> float:
    # deepseek.py: trtllm's large-EP graph scales every decode layer op by _PDL_FACTOR
    large_ep_decode = eng.stack.startswith("trtllm") and eng.comm and phase == "decode"
    return eng.model._PDL_FACTOR if large_ep_decode else 1.0


def shapes() -> List[Tuple[str, int, int]]:
    """(phase, sequences per GPU, context or prompt length), grid points and between them."""
    decode = [("decode", n, c) for n in DECODE_SEQUENCES for c in DECODE_CONTEXTS]
    prefill = [("prefill", n, length) for length in PREFILL_LENGTHS for n in PREFILL_BATCHES
               if n * length <= PREFILL_MAX_TOKENS]
    return decode + prefill


def rows(device: str, eng: Engine, precision: str) -> List[Dict[str, object]]:
    out = []
    for phase, sequences, context in shapes():
        step = decode_step if phase == "decode" else prefill_step
        step_ms, step_parts = step(eng, sequences, context)
        comm = eng.comm.get("generation" if phase == "decode" else "context", "fused")
        row: Dict[str, object] = {
            "device": device, "stack": eng.stack, "phase": phase,
            "attention_dp": ATTENTION_DP, "moe_ep": MOE_EP, "precision_gemm": precision,
            "precision_moe": precision, "precision_kv": KV_CACHE,
            "sequences_per_gpu": sequences, "context": context,
            "prompt_tokens_per_gpu": sequences * context if phase == "prefill" else 0,
            "step_ms": round(step_ms, 4), "precision_fmha": eng.fmha, "moe_comm": comm,
            "pdl_factor": pdl_factor(eng, phase)}
        row.update({f"part_{k}": round(v, 4) for k, v in step_parts.items()})
        out.append(row)
    return out


def estimates(aic, model: str = "deepseek-v3") -> List[Dict[str, object]]:
    """Every device's rows: V3's required stack must answer; another stack, and V4's, are kept
    where they do."""
    out: List[Dict[str, object]] = []
    versions = STACK_VERSIONS[model]
    for device, (system, precision) in DEVICES.items():
        if model != "deepseek-v3":
            precision = "fp8_block"
        for stack in (REQUIRED_STACK, *OTHER_STACKS):
            try:
                out += rows(device, compile_engine(aic, system, stack, precision,
                                                   versions[stack]), precision)
            except Exception as err:  # aiconfigurator's data misses surface as many types
                if model == "deepseek-v3" and stack == REQUIRED_STACK:
                    raise
                print(f"vendor_steps: {device} {stack}: left out: {err}", file=sys.stderr)
    return out


def write(path: Path, table: List[Dict[str, object]]) -> None:
    part_columns = list(dict.fromkeys(k for row in table for k in row if k.startswith("part_")))
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        f.write(NOTICE)
        writer = csv.DictWriter(f, fieldnames=[*COLUMNS, *part_columns], restval="")
        writer.writeheader()
        writer.writerows(table)


def main(argv: Sequence[str] = ()) -> None:
    parser = argparse.ArgumentParser(prog="python -m engine.kernels.vendor_steps",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="the CSV to write")
    parser.add_argument("--model", choices=MODELS, default="deepseek-v3",
                        help="steptrace's model to estimate (default: deepseek-v3)")
    args = parser.parse_args(list(argv) or None)
    aic = load_aiconfigurator(args.model)
    table = estimates(aic, args.model)
    write(args.out, table)
    print(f"vendor_steps: {len(table)} rows -> {args.out}")


if __name__ == "__main__":
    main(sys.argv[1:])
