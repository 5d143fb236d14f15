"""steptrace's modeled step against NVIDIA aiconfigurator-core 0.12.0's own step estimates,
shape by shape and part by part (docs/modeling.md, "Against the vendor's own step
estimates"). The estimates are workloads/validation/kernels/aiconfigurator_steps.csv and
_v4.csv (engine/kernels/vendor_steps.py); the comparison:

    python -m engine.kernels.vendor_compare [--markdown] [--model deepseek-v4-flash]

Each CSV row is one rank's step of DeepSeek-V3 (V4-Flash) under attention DP 8 and EP 8 on
one device and stack. steptrace runs the same step: a decode row as the completion engine's
first step (every sequence decodes one token over `context` keys), a prefill row as the
prompt engine's first (`sequences_per_gpu` whole prompts of `context` tokens per rank),
each part at the precision the vendor's row runs it at, the default expert_imbalance.

The vendor's per-op times are grouped into steptrace's parts (VENDOR_PARTS). trtllm's
large-EP decode ops carry a PDL discount (pdl_factor); the parts steptrace's tables time
carry its stack's (streams.py): those of the vendor's per-layer parts are brought to
steptrace's discount before the ratios. aiconfigurator prices all 61 layers as MoE
layers, steptrace 58 MoE layers and 3 dense FFN ones: the vendor's MoE-layer parts are
scaled by 58/61, and steptrace's dense FFN layers are reported apart (no vendor twin).
V4's mHC (hyper-connection mixing around each block) is a vendor part steptrace's layer does
not carry, reported apart too.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from .. import EngineConfig, LLMEngine, SchedulerConfig
from ..deployment import Deployment
from ..plan import KIND_DECODE, KIND_FINAL
from .load import kernel_table
from .lookup import Curve
from .step import find
from .streams import decode_streams

VALIDATION = Path(__file__).resolve().parents[2] / "workloads/validation/kernels"
CSV = VALIDATION / "aiconfigurator_steps.csv"
CSVS = {"deepseek-v3": CSV, "deepseek-v4-flash": VALIDATION / "aiconfigurator_steps_v4.csv"}
BLOCK = 64
PRECISION = {"nvfp4": "fp4", "fp8_block": "fp8", "fp8": "fp8", "bfloat16": "bf16"}
# vendor op -> steptrace part. `small`: norms, RoPE and the KV write, activations, the
# embedding (each a 3 us floor plus its bytes); `duplicate`: sglang's large-EP graph prices
# the fused q_a + kv_a GEMM twice (downscale and qkv_a_proj); `hidden`: what its overlapped
# streams take back (<= 0). Every other part is a kernel steptrace's part runs too.
VENDOR_PARTS = {
    "attention": ("downscale_gemm", "q_b_proj_gemm", "kv_b_proj_gemm", "bmm_pre", "attention",
                  "bmm_post", "proj_gemm", "mla_block"),
    "experts": ("moe",),
    "dispatch": ("moe_dispatch", "moe_prepare", "moe_pre_dispatch"),
    "combine": ("moe_combine", "moe_post_dispatch"),
    "dense": ("shared_gate_up_gemm", "shared_ffn2_gemm", "gate_ffn1_gemm", "ffn2_gemm",
              "router_gemm", "logits_gemm"),
    "small": ("embedding", "add_norm_1", "q_a_layernorm", "rope_kvcache", "add_norm_2",
              "shared_act_gate", "act_gate", "moe_reduce_add", "p2p", "attn_norm", "ffn_norm"),
    "duplicate": ("qkv_a_proj_gemm",),
    "hidden": ("overlap_hidden",),
    "mhc": ("mhc_pre", "mhc_post"),
}
# once a step, not per layer: neither PDL-discounted nor one of the 61 layers
ONCE = ("embedding", "logits_gemm", "p2p")
COMPARED = ("attention", "experts", "dispatch", "combine", "dense")
# the shapes the docs quote one by one (device, stack, phase, sequences per GPU, context)
SAMPLES = {"deepseek-v3": (("B200", "trtllm", "decode", 1, 1024),
                           ("B200", "trtllm", "decode", 64, 4096),
                           ("GB200", "trtllm", "decode", 8, 2048),
                           ("H200", "sglang", "decode", 64, 4096),
                           ("H100", "trtllm", "prefill", 2, 4096),
                           ("B200", "sglang", "prefill", 1, 8192)),
           "deepseek-v4-flash": (("B200", "trtllm", "decode", 1, 1024),
                                 ("B200", "trtllm", "decode", 64, 4096),
                                 ("B200", "trtllm", "decode", 256, 4096),
                                 ("B200", "trtllm", "prefill", 1, 8192),
                                 ("H200", "sglang", "decode", 64, 4096),
                                 ("GB200", "sglang", "prefill", 4, 1024))}


@dataclass
class VendorRow:
    device: str
    stack: str  # "trtllm", "sglang"
    version: str
    phase: str
    sequences: int  # per GPU
    context: int  # decode: the KV length a token attends over; prefill: the prompt
    precision: str  # GEMMs and experts (aiconfigurator's name)
    kv: str
    comm: str  # the all-to-all backend, or "fused"
    pdl: float
    step_ms: float
    ops: Dict[str, float]  # per-op ms, all layers, as the CSV holds them

    @property
    def shape(self) -> str:
        return f"{self.sequences} x {self.context}"

    def share(self, part: str) -> float:
        """The vendor's ops of `part` (VENDOR_PARTS) as a share of its step, as it times them."""
        return sum(self.ops.get(op, 0.0) for op in VENDOR_PARTS[part]) / self.step_ms

    @property
    def key(self) -> Tuple[str, str, str, int, int]:
        return self.device, self.stack, self.phase, self.sequences, self.context


@dataclass
class Comparison:
    row: VendorRow
    modeled_ms: float
    modeled: Dict[str, float]  # steptrace's parts (ms); dense without the dense FFN layers
    dense_ffn_ms: float  # steptrace's 3 dense FFN layers
    vendor: Dict[str, float]  # VENDOR_PARTS groups, per-layer ones at steptrace's PDL, 58/61
    flagged: bool  # some part of the modeled step was looked up outside its rows
    hidden_ms: float  # what steptrace's second stream hid (<= 0; one micro-batch)

    @property
    def error(self) -> float:
        return self.modeled_ms / self.row.step_ms - 1

    def ratio(self, part: str) -> Optional[float]:
        vendor = self.vendor[part]
        return self.modeled[part] / vendor if vendor > 0 else None


def read_rows(path: Path = CSV) -> List[VendorRow]:
    known = {op for ops in VENDOR_PARTS.values() for op in ops}
    out = []
    with path.open(newline="") as f:
        lines = (line for line in f if not line.startswith("#"))
        for n, r in enumerate(csv.DictReader(lines), start=3):  # the notice, the header
            ops = {k[5:]: float(v) for k, v in r.items() if k.startswith("part_") and v}
            unknown = sorted(set(ops) - known)
            if unknown:
                raise ValueError(f"{path}:{n}: part_{unknown[0]}: no steptrace part is mapped "
                                 f"to it (vendor_compare.VENDOR_PARTS)")
            for column in ("precision_gemm", "precision_kv"):
                if r[column] not in PRECISION:
                    raise ValueError(f"{path}:{n}: {column}: expected one of "
                                     f"{', '.join(PRECISION)}, got {r[column]!r}")
            stack, _, version = r["stack"].partition(" ")
            step_ms = float(r["step_ms"])
            if abs(sum(ops.values()) - step_ms) > 1e-3 * max(step_ms, 1):
                raise ValueError(f"{path}:{n}: the parts sum to {sum(ops.values()):.4f} ms, "
                                 f"step_ms is {step_ms}")
            out.append(VendorRow(r["device"], stack, version, r["phase"],
                                 int(r["sequences_per_gpu"]), int(r["context"]),
                                 r["precision_gemm"], r["precision_kv"], r["moe_comm"],
                                 float(r["pdl_factor"]), step_ms, ops))
    return out


def vendor_parts(row: VendorRow, layers: int, moe_layers: int,
                 timed: Sequence[str] = ()) -> Dict[str, float]:
    """The vendor's ops grouped as steptrace's parts; the per-layer ones of the parts
    steptrace's tables time (`timed`) at its PDL discount rather than the vendor's, the
    MoE-layer ones (experts, all-to-alls, shared experts, router) at steptrace's MoE
    layers."""
    out = {}
    for part, ops in VENDOR_PARTS.items():
        pdl = layer_scale(row) if part in timed else row.pdl
        total = 0.0
        for op in ops:
            ms = row.ops.get(op, 0.0)
            if op not in ONCE:
                ms *= pdl / row.pdl
                if part in ("experts", "dispatch", "combine", "dense"):
                    ms *= moe_layers / layers
            total += ms
        out[part] = total
    return out


def layer_scale(row: VendorRow) -> float:
    """steptrace's PDL discount on the row's per-layer kernels (streams.py)."""
    return decode_streams(row.stack).layer_scale.value if row.phase == "decode" else 1.0


def payloads(row: VendorRow) -> Tuple[str, str]:
    """(dispatch, combine) as the vendor's all-to-all sends them (aiconfigurator's
    moe_comm.communication_dtype_for): trtllm's FP4 checkpoints send NVFP4 (LL combines in
    FP4), its FP8 ones FP8 in LL and BF16 in HT; SGLang's DeepEP its defaults, FP8 out and
    BF16 back (also where the vendor's graph is fused: steptrace's step has the all-to-alls)."""
    if row.comm.startswith("trtllm_deepep") or row.comm.startswith("nvlink"):
        if row.precision == "nvfp4":
            return "fp4", "fp4"
        payload = "fp8" if row.comm == "trtllm_deepep_ll" else "bf16"
        return payload, payload
    return "fp8", "bf16"


def deployment(row: VendorRow) -> Deployment:
    gemm = PRECISION[row.precision]
    dispatch, combine = payloads(row)
    return Deployment(devices=8, attention_dp=8, moe_ep=8, stack=row.stack, precision=dict(
        attention=gemm, kv=PRECISION[row.kv], dense=gemm,
        experts=gemm, dispatch=dispatch, combine=combine))


def engine(row: VendorRow, model: str) -> LLMEngine:
    """An engine whose first step is the row's: every rank `sequences` rows of it."""
    n, decode = row.sequences, row.phase == "decode"
    blocks = 8 * n * (row.context // BLOCK + 2)
    scheduler = SchedulerConfig(
        max_num_batched_tokens=max(n, 2) if decode else n * row.context, num_kv_blocks=blocks,
        block_size=BLOCK, dp_size=8, max_num_seqs=n,
        engine_type="completion" if decode else "prompt")
    e = LLMEngine(EngineConfig(scheduler=scheduler, model=model, executor=f"modeled:{row.device}",
                               precision="fp8", deployment=deployment(row)))
    for i in range(8 * n):  # decode: prefilled to context - 1, the step's token the last key
        e.add_request(i, prompt_len=row.context - (1 if decode else 0), max_new_tokens=2)
    return e


def check_step(row: VendorRow, result) -> None:
    kind = KIND_DECODE if row.phase == "decode" else KIND_FINAL
    q = 1 if row.phase == "decode" else row.context
    for b in result.plan.batches:
        if (len(b.kind) != row.sequences or any(k != kind for k in b.kind)
                or any(x != q for x in b.seqlen_q) or any(x != row.context for x in b.seqlen_k)):
            raise RuntimeError(f"{row.device} {row.stack} {row.phase} {row.shape}: rank "
                               f"{b.rank}'s first step is not {row.sequences} rows of "
                               f"{q} tokens over {row.context} keys")


_GEMMS: Dict[Tuple[str, str, str, int, int], Curve] = {}  # find() reads every curve a call


def _gemm(e: LLMEngine, stack: str, precision: str, n: int, k: int) -> Curve:
    key = (e.device_profile.name, stack, precision, n, k)
    if key not in _GEMMS:
        curve = find(kernel_table(e.device_profile, stack), "gemm", precision=precision, n=n,
                     k=k)
        if curve is None:
            raise LookupError(f"{key[0]} {stack}: no gemm curve at {precision} n={n} k={k}")
        _GEMMS[key] = curve
    return _GEMMS[key]


def dense_ffn_ms(e: LLMEngine, row: VendorRow, tokens: int) -> float:
    """steptrace's dense FFN layers on one rank, looked up and discounted as its dense part
    looks them up and discounts them."""
    m, d = e.model_config, e.config.deployment
    if not m.first_k_dense_replace:
        return 0.0
    width = m.dense_intermediate_size // d.dense_tp
    us = sum(_gemm(e, row.stack, d.precision["dense"], n, k).at(tokens)[0]
             for n, k in ((2 * width, m.hidden_size), (m.hidden_size, width)))
    return m.first_k_dense_replace * us * layer_scale(row) / 1e3


def compare(row: VendorRow, model: str = "deepseek-v3") -> Comparison:
    e = engine(row, model)
    result = e.step()
    check_step(row, result)
    slowest = max(result.flops, key=lambda c: c.rank_s)
    modeled = {p: getattr(slowest, f"{p}_s") * 1e3 for p in COMPARED}
    ffn = dense_ffn_ms(e, row, row.sequences * (1 if row.phase == "decode" else row.context))
    modeled["dense"] -= ffn
    m = e.model_config
    vendor = vendor_parts(row, m.num_hidden_layers,
                          m.num_hidden_layers - m.first_k_dense_replace,
                          e.executor.step_model["timed"])
    routed = slowest.experts_s + slowest.dispatch_s + slowest.combine_s
    return Comparison(row, result.forward_ns / 1e6, modeled, ffn, vendor,
                      bool(slowest.extrapolated), (0.0 - min(slowest.aux_s, routed)) * 1e3)


def compare_all(rows: Iterable[VendorRow], model: str = "deepseek-v3") -> List[Comparison]:
    return [compare(r, model) for r in rows]


def samples(rows: Sequence[VendorRow], model: str = "deepseek-v3") -> List[VendorRow]:
    """The rows of the shapes the docs quote, in SAMPLES' order."""
    at = {r.key: r for r in rows}
    return [at[s] for s in SAMPLES[model]]


# -- the summary --------------------------------------------------------------------------

def _range(values: Sequence[float], fmt) -> str:
    if not values:
        return "-"
    return f"{fmt(statistics.median(values))} [{fmt(min(values))}, {fmt(max(values))}]"


def _pct(x: float) -> str:
    return f"{100 * x:+.0f} %"


def _ratio(x: float) -> str:
    return f"{x:.2f}"


def groups(comparisons: Sequence[Comparison]) -> Dict[Tuple[str, str, str], List[Comparison]]:
    out: Dict[Tuple[str, str, str], List[Comparison]] = {}
    for c in comparisons:
        out.setdefault((c.row.device, c.row.stack, c.row.phase), []).append(c)
    return out


# the vendor's parts reported as shares of its step, per model: column -> VENDOR_PARTS group
SHARES = {"deepseek-v3": {"vendor small ops": "small", "vendor overlap": "hidden"},
          "deepseek-v4-flash": {"vendor small ops": "small", "vendor mHC": "mhc",
                                "vendor overlap": "hidden"}}


def summary_header(model: str = "deepseek-v3") -> Tuple[str, ...]:
    return ("device", "stack", "phase", "shapes", "step error", *COMPARED, *SHARES[model],
            "steptrace overlap", "steptrace dense FFN", "worst shape")


SUMMARY_HEADER = summary_header()


def summary_rows(comparisons: Sequence[Comparison],
                 model: str = "deepseek-v3") -> List[Tuple[str, ...]]:
    """One line per device, stack and phase: the step error and each part's ratio
    (steptrace over vendor) as median [min, max]; the vendor's parts steptrace has no twin
    for (SHARES) and steptrace's dense FFN layers, as the median share of their own step;
    the worst shape's error."""
    out = []
    for (device, stack, phase), cs in groups(comparisons).items():
        worst = max(cs, key=lambda c: abs(c.error))
        ratios = [_range([r for c in cs if (r := c.ratio(p)) is not None], _ratio)
                  for p in COMPARED]
        shares = [f"{100 * statistics.median(c.row.share(p) for c in cs):.0f} %"
                  for p in SHARES[model].values()]
        ffn = statistics.median(c.dense_ffn_ms / c.modeled_ms for c in cs)
        hidden = statistics.median(c.hidden_ms / c.modeled_ms for c in cs)
        flagged = sum(c.flagged for c in cs)
        out.append((device, stack, phase, f"{len(cs)}" + (f" ({flagged} flagged)" if flagged
                                                          else ""),
                    _range([c.error for c in cs], _pct), *ratios, *shares,
                    f"{100 * hidden:.0f} %", f"{100 * ffn:.0f} %", f"{worst.row.shape}: {_pct(worst.error)}"))
    return out


SAMPLE_HEADER = ("device", "stack", "phase", "shape", "vendor ms", "steptrace ms", "error",
                 *COMPARED)


def sample_rows(comparisons: Sequence[Comparison]) -> List[Tuple[str, ...]]:
    """The quoted shapes: both steps, then each part as steptrace ms / vendor ms."""
    return [(c.row.device, c.row.stack, c.row.phase, c.row.shape, f"{c.row.step_ms:.2f}",
             f"{c.modeled_ms:.2f}", _pct(c.error),
             *(f"{c.modeled[p]:.2f} / {c.vendor[p]:.2f}" for p in COMPARED))
            for c in comparisons]


def markdown(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join([*lines, *("| " + " | ".join(r) + " |" for r in rows)])


def text(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    return "\n".join("  ".join(str(x).ljust(w) for x, w in zip(r, widths)).rstrip()
                     for r in (header, *rows))


def worst_shapes(comparisons: Sequence[Comparison], n: int = 3) -> List[str]:
    out = []
    for (device, stack, phase), cs in groups(comparisons).items():
        worst = sorted(cs, key=lambda c: -abs(c.error))[:n]
        out.append(f"{device} {stack} {phase}: " + ", ".join(
            f"{c.row.shape} {_pct(c.error)} ({c.modeled_ms:.2f} vs {c.row.step_ms:.2f} ms)"
            for c in worst))
    return out


def main(argv: Sequence[str] = ()) -> None:
    parser = argparse.ArgumentParser(prog="python -m engine.kernels.vendor_compare",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--markdown", action="store_true",
                        help="the docs' tables (summary, then the quoted shapes)")
    parser.add_argument("--model", choices=CSVS, default="deepseek-v3",
                        help="steptrace's model (default: deepseek-v3)")
    parser.add_argument("--csv", type=Path, help="the vendor's step estimates (default: the "
                        "model's under workloads/validation/kernels/)")
    args = parser.parse_args(list(argv) or None)
    comparisons = compare_all(read_rows(args.csv or CSVS[args.model]), args.model)
    quoted = sorted((c for c in comparisons if c.row.key in SAMPLES[args.model]),
                    key=lambda c: SAMPLES[args.model].index(c.row.key))
    render = markdown if args.markdown else text
    print(render(summary_header(args.model), summary_rows(comparisons, args.model)))
    print()
    print(render(SAMPLE_HEADER, sample_rows(quoted)))
    if not args.markdown:
        print("\nworst shapes (sequences per GPU x context):")
        print("\n".join(worst_shapes(comparisons)))


if __name__ == "__main__":
    main(sys.argv[1:])
