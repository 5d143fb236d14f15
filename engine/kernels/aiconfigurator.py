"""The NVIDIA kernel tables (engine/kernels/<profile>/<stack>.csv), derived from the per-op
data NVIDIA collected for aiconfigurator-core 0.12.0 (Apache-2.0; engine/kernels/NOTICE):

    python -m engine.kernels.aiconfigurator --out engine/kernels

with a Python that has aiconfigurator-core==0.12.0 installed (exactly: the next release moves
its data to another namespace). The data is found without importing the package; only its
parquet files and YAML are read. Only DeepSeek-V3/R1 and DeepSeek-V4-Flash shapes are kept.

Versions. Each stack is read at aiconfigurator's `current` version for it
(systems/query_versions.yaml: trtllm 1.3.0rc20, sglang 0.5.14); a family that version did not
collect comes from the newest older collection, as aiconfigurator's own backward fill does
(trtllm all-to-all 1.3.0rc11, sglang DeepEP 0.5.12). DeepSeek-V4's attention modules come
from the newest collection of any version: TensorRT-LLM collected them only at 1.3.0rc23,
aiconfigurator's `next` slot, where its own V4 estimate reads them. NCCL: the newest
collection per device (2.29.2, taken on the trtllm 1.3.0rc20 image), not the older one the
system YAML names.
Duplicate rows keep the first, as aiconfigurator's loaders do. In every curve a time over 3x
both its neighbours' along tokens is left out as a failed run, and the curve is cut to its
largest full grid (tokens up to a bound, at every context that has them all).

Units. `latency` columns are milliseconds except moe_a2a_perf's, which is microseconds, as are
the DeepEP tables' `*_us` columns.

Families, and what their columns meant in the collection:
- gemm: m = tokens. FP8 is the block-scaled `fp8_block` (DeepSeek's checkpoint format; the
  per-tensor `fp8` rows are not used); FP4 is `nvfp4`. An (n, k) that was not collected is
  answered at each collected m as aiconfigurator's engine does (perf_database/gemm.rs,
  ScatteredSites): utilisation SOL/latency, inverse-square-distance weighted over the <= 4
  nearest collected (n, k) within 2 octaves (log2 space) whose m sweep covers m, times the
  shape's SOL; every collected latency first raised to at least its SOL.
- moe: `num_tokens` is already the whole EP group's tokens before top-k: the collector runs one
  rank's fused MoE (moe_ep_size = ep) over num_tokens hidden states routed across all
  experts, the rank computing its experts/ep; aiconfigurator's roofline divides
  num_tokens * topk by ep, and its MoE op queries per-rank tokens * attention_dp_size. The
  `balanced` distribution (steptrace applies its own imbalance). trtllm FP4 at <= 128 tokens
  takes the min-latency kernel where collected, as aiconfigurator does. Tokens stop at 16,384.
- mla_decode (generation_mla_perf): batch = tokens; context = isl + step, the KV length the
  new token attends over (the collector prefills `step` tokens, then times one decode step;
  aiconfigurator keys the same sum). `num_heads` is already per device.
- mla_prefill (context_mla_perf): batch-1 rows, tokens = isl, no cached prefix (none was
  collected); precision = the KV cache dtype (the attention runs in bf16 in every row).
- mla_bmm: mla_gen_pre / mla_gen_post -> mode pre / post.
- dispatch, combine: tokens per rank; width = the EP group (trtllm's ep_size; a DeepEP
  collection spans one node: GPUs per node x node_num, 4 on GB200). low_latency: DeepEP LL,
  dispatch FP8 and combine BF16 in sglang's collection, trtllm's rows by their comm_dtype;
  normal: DeepEP normal mode, transmit + notify at 20 SMs (DeepEP's and aiconfigurator's
  default), dispatch FP8 (dispatch takes ~0.6x combine's time: half the bytes) and combine
  BF16. Only single-node rows were collected: no scaleout rows. GB200's trtllm table takes the
  NVLink all-to-all alone (what TensorRT-LLM runs across the NVL72), collected for V3 only.
- v4_decode, v4_prefill (dsv4_{csa,hca}_{generation,context}_module_perf): DeepSeek-V4's
  whole attention module per layer (q and kv projections, compressor, indexer, sparse and
  windowed attention, grouped output projection), mode csa (compress ratio 4) or hca (128).
  Decode as mla_decode (batch = tokens, context = isl + step); prefill as mla_prefill (batch-1
  rows, tokens = isl, context = step, the cached prefix). `num_heads` is already per device;
  the rows kept are V4-Flash's (num_heads x tp_size = 64; n = its hidden size), FP8
  block-scaled projections and the FP8 KV cache (precision). Where the stack collected a
  topK calibration (SGLang), a CSA row is less its measured topK delta, max(0, flat -
  top_last) at the row's (prefix, isl, batch), as aiconfigurator corrects it (the module
  was timed on degenerate scores).
- all_reduce (the stack's custom all-reduce; sglang's CUDA-graph rows) and all_gather (NCCL):
  message sizes count bf16 elements, all powers of two, so none is a whole number of 7,168-wide
  tokens: each curve is read at power-of-two tokens by linear interpolation in message size,
  aiconfigurator's rule for these curves, for V3's and V4's hidden sizes. all_gather's size is
  the gathered output.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Set, Tuple

import numpy as np
import pandas as pd
import yaml
from packaging.version import Version

from .table import CURVE_KEYS, KernelTable, Row, write

AIC = "aiconfigurator-core"
AIC_VERSION = "0.12.0"
SYSTEMS = {"b200": "b200_sxm", "b300": "b300_sxm", "gb200": "gb200", "h100": "h100_sxm",
           "h200": "h200_sxm"}  # steptrace profile -> aiconfigurator system
STACKS = ("trtllm", "sglang")
NOTICE = ("Apache-2.0; Copyright (c) 2025-2026 NVIDIA CORPORATION & AFFILIATES; "
          "see engine/kernels/NOTICE")

# DeepSeek-V3/R1
HIDDEN, Q_LORA, KV_LORA, ROPE, NOPE, V_HEAD, HEADS = 7168, 1536, 512, 64, 128, 128, 128
DENSE_INTER, MOE_INTER, EXPERTS, TOPK, VOCAB = 18432, 2048, 256, 8, 129280
TPS = (1, 2, 4, 8)
HEADS_PER_DEVICE = tuple(HEADS // tp for tp in TPS)
# DeepSeek-V4-Flash (its vocabulary is V3's)
V4_HIDDEN, V4_MOE_INTER, V4_EXPERTS, V4_TOPK, V4_HEADS = 4096, 2048, 256, 6, 64

GEMM_DTYPES = {"bfloat16": "bf16", "fp8_block": "fp8", "nvfp4": "fp4"}
KV_DTYPES = {"bfloat16": "bf16", "fp8": "fp8"}
COMM_DTYPES = {"bfloat16": "bf16", "fp8": "fp8", "nvfp4": "fp4", "fp4": "fp4"}
A2A_MODES = {"trtllm_deepep_ll": "low_latency", "trtllm_deepep_ht": "normal"}
BMM_MODES = {"mla_gen_pre": "pre", "mla_gen_post": "post"}
SPIKE = 3.0
DEEPEP_NORMAL_SMS = 20
# aiconfigurator's GEMM site transfer (perf_database/gemm.rs, gemm_engine_config)
NEAREST_SITES, MAX_SITE_OCTAVES = 4, 2.0
# per-element bytes and the compute pipe of each GEMM dtype (common/enums.rs)
GEMM_SOL = {"bfloat16": (2.0, "bfloat16_tc_flops"), "fp8_block": (1.0, "fp8_tc_flops"),
            "nvfp4": (9 / 16, "fp4_tc_flops")}

BLANK: Dict[str, Any] = {  # Row columns a family leaves empty
    "mode": "", "precision": "", "context": 0, "n": 0, "k": 0, "heads": 0, "experts": 0,
    "topk": 0, "width": 0, "topology": ""}
Sol = Callable[[float, float, float], float]  # (m, n, k) -> speed-of-light ms


@dataclass(frozen=True)
class Routing:
    """One model's routed experts, and its expert precisions as collected (ours by theirs)."""
    hidden: int
    inter: int
    experts: int
    topk: int
    dtypes: Mapping[str, str]


# V4's experts are MXFP4 (MXFP8 activations), V3's NVFP4 checkpoint's NVFP4: `fp4` is each
# model's 4-bit checkpoint
ROUTINGS = (Routing(HIDDEN, MOE_INTER, EXPERTS, TOPK, {"fp8_block": "fp8", "nvfp4": "fp4"}),
            Routing(V4_HIDDEN, V4_MOE_INTER, V4_EXPERTS, V4_TOPK,
                    {"fp8_block": "fp8", "w4a8_mxfp4_mxfp8": "fp4"}))
V4_MODES = ("csa", "hca")  # compress ratio 4 (indexed) and 128


class DataError(RuntimeError):
    """aiconfigurator-core missing, the wrong version, or its data not as expected."""


def systems_dir() -> Path:
    """aiconfigurator-core's systems/ folder, found without importing the package."""
    try:
        version = importlib.metadata.version(AIC)
    except importlib.metadata.PackageNotFoundError:
        version = None
    spec = importlib.util.find_spec("aiconfigurator_core")
    if version is None or spec is None or not spec.submodule_search_locations:
        raise DataError(f"{AIC} is not installed; the tables derive from its collected data: "
                        f"pip install {AIC}=={AIC_VERSION}")
    if version != AIC_VERSION:
        raise DataError(f"{AIC} {version} is installed, but the tables derive from "
                        f"{AIC_VERSION} exactly (later releases move its data): "
                        f"pip install {AIC}=={AIC_VERSION}")
    return Path(spec.submodule_search_locations[0]) / "systems"


def read_yaml(path: Path) -> dict:
    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f)


def current_version(systems: Path, system: str, stack: str) -> str:
    """aiconfigurator's `current` version of `stack` on `system`."""
    slots = read_yaml(systems / "query_versions.yaml")
    return slots.get("overrides", {}).get(system, {}).get(stack, slots["defaults"][stack])[
        "current"]


def collection(folder: Path, filename: str, newest: Optional[str]) -> Optional[Tuple[str, Path]]:
    """(version, path) of the newest `folder/<version>/filename` at or below `newest` (any
    version when None), or None where no such version collected it."""
    if not folder.is_dir():
        return None
    found = [(Version(d.name), d.name, d / filename) for d in folder.iterdir()
             if (d / filename).is_file() and (newest is None or Version(d.name) <= Version(newest))]
    return max(found)[1:] if found else None


def first_wins(frame: pd.DataFrame, keys: List[str]) -> pd.DataFrame:
    """One row per key, the first in file order (aiconfigurator's loaders skip repeats)."""
    return frame.drop_duplicates(keys, keep="first")


def spikes(points: List[Tuple[int, float]]) -> Set[int]:
    """The tokens whose time is over SPIKE times both neighbours' along tokens: a failed run
    (no kernel slows down that much for one step of tokens and speeds up again)."""
    points = sorted(points)
    return {t for (_, a), (t, y), (_, b) in zip(points, points[1:], points[2:])
            if y > SPIKE * max(a, b)}


def full_grid(grid: Dict[int, Set[int]]) -> Tuple[Set[int], List[int]]:
    """(tokens, contexts) of the largest full grid within `grid` (context -> its tokens): the
    tokens up to some bound, at every context that has each of them (ties keep more tokens)."""
    tokens = sorted(set().union(*grid.values()))
    best: Tuple[int, Set[int], List[int]] = (0, set(), [])
    for i in range(len(tokens)):
        want = set(tokens[:i + 1])
        contexts = sorted(c for c, got in grid.items() if want <= got)
        if len(want) * len(contexts) >= best[0]:
            best = (len(want) * len(contexts), want, contexts)
    return best[1], best[2]


def tidy(rows: List[Row]) -> Tuple[List[Row], List[Row]]:
    """Each curve's rows less its spikes (at each context), cut to its largest full grid; and
    the spikes."""
    kept: List[Row] = []
    dropped: List[Row] = []
    for curve in KernelTable("", "", "", "", rows).curves().values():
        at: Dict[int, Dict[int, Row]] = {}
        for r in curve:
            at.setdefault(r.context, {})[r.tokens] = r
        for by_tokens in at.values():
            for t in spikes([(t, r.time_us) for t, r in by_tokens.items()]):
                dropped.append(by_tokens.pop(t))
        tokens, contexts = full_grid({c: set(by_tokens) for c, by_tokens in at.items()})
        kept += [at[c][t] for c in contexts for t in sorted(tokens)]
    return kept, dropped


def at_tokens(sizes: np.ndarray, latencies: np.ndarray, n: int) -> List[Tuple[int, float]]:
    """(tokens, latency) at power-of-two tokens of `n` elements, linear in message size between
    the collected sizes, for each token count whose size lies among them."""
    order = np.argsort(sizes)
    sizes, latencies = sizes[order], latencies[order]
    out, tokens = [], 1
    while tokens * n <= sizes[-1]:
        if tokens * n >= sizes[0]:
            out.append((tokens, float(np.interp(tokens * n, sizes, latencies))))
        tokens *= 2
    return out


@dataclass(frozen=True)
class Sites:
    """One GEMM dtype's collected (n, k) sites, each with its m sweep [(m, latency ms)], in
    aiconfigurator's enumeration order (the walk of its m -> n -> k dict: equal distances to a
    query break by it)."""
    curves: Dict[Tuple[int, int], Tuple[Tuple[int, float], ...]]

    @classmethod
    def of(cls, rows: pd.DataFrame) -> "Sites":
        rows = rows.reset_index(drop=True)
        walk = rows.assign(
            _m=rows.groupby("m", sort=False).ngroup(),
            _n=rows.groupby(["m", "n"], sort=False).ngroup(),
            _k=rows.groupby(["m", "n", "k"], sort=False).ngroup(),
        ).sort_values(["_m", "_n", "_k"], kind="stable")
        sweeps = {(int(n), int(k)): tuple(sorted(zip(g["m"].tolist(), g["latency"].tolist())))
                  for (n, k), g in rows.groupby(["n", "k"])}
        order = dict.fromkeys(zip(walk["n"].tolist(), walk["k"].tolist()))
        return cls({site: sweeps[site] for site in order})

    def transfer(self, m: int, n: int, k: int, sol: Sol) -> Optional[float]:
        """Latency (ms) of an uncollected (n, k) at m, aiconfigurator's way; None where no
        site within MAX_SITE_OCTAVES has m in its sweep (it would extrapolate there)."""
        qn, qk = math.log2(n), math.log2(k)
        near = []
        for i, ((sn, sk), sweep) in enumerate(self.curves.items()):
            if sweep[0][0] <= m <= sweep[-1][0]:
                d = math.sqrt((math.log2(sn) - qn) ** 2 + (math.log2(sk) - qk) ** 2)
                if d <= MAX_SITE_OCTAVES:
                    near.append((d, i, sn, sk))
        near.sort()
        util = weights = 0.0
        for d, _, sn, sk in near[:NEAREST_SITES]:
            w = 1.0 / (d * d + 1e-12)
            util += w * sol(m, sn, sk) / _on_sweep(self.curves[sn, sk], m)
            weights += w
        return sol(m, n, k) * weights / util if weights else None


def _on_sweep(sweep: Tuple[Tuple[int, float], ...], m: int) -> float:
    ms = [p[0] for p in sweep]
    return float(np.interp(m, ms, [p[1] for p in sweep]))


def gemm_sol(gpu: dict, dtype: str) -> Sol:
    """aiconfigurator's GEMM speed of light in ms: max(math, memory) on the system's peaks."""
    memory, pipe = GEMM_SOL[dtype]
    flops, bandwidth = float(gpu[pipe]), float(gpu["mem_bw"])
    return lambda m, n, k: max(2 * m * n * k / flops,
                               memory * (m * n + m * k + n * k) / bandwidth) * 1000


def gemm_shapes() -> Dict[Tuple[int, int], Tuple[str, ...]]:
    """(n, k) -> our precisions, for DeepSeek-V3/R1's GEMMs and DeepSeek-V4-Flash's outside
    its attention module, at tp 1, 2, 4, 8: projections and FFNs in every precision, the
    router and the LM head in bf16."""
    layer = {(Q_LORA + KV_LORA + ROPE, HIDDEN), (HIDDEN, 2 * HIDDEN)}  # fused q_a+kv_a; eh_proj
    for tp in TPS:
        layer |= {(HEADS * (NOPE + ROPE) // tp, Q_LORA), (HEADS * (NOPE + V_HEAD) // tp, KV_LORA),
                  (HIDDEN, HEADS * V_HEAD // tp),  # q_b, kv_b, o_proj
                  (2 * DENSE_INTER // tp, HIDDEN), (HIDDEN, DENSE_INTER // tp),
                  (2 * MOE_INTER // tp, HIDDEN), (HIDDEN, MOE_INTER // tp),  # dense, shared FFN
                  (2 * V4_MOE_INTER // tp, V4_HIDDEN), (V4_HIDDEN, V4_MOE_INTER // tp)}  # V4's
    shapes = {shape: tuple(GEMM_DTYPES.values()) for shape in layer}
    for hidden, experts in ((HIDDEN, EXPERTS), (V4_HIDDEN, V4_EXPERTS)):
        for shape in {(experts, hidden)} | {(VOCAB // tp, hidden) for tp in TPS}:
            shapes[shape] = ("bf16",)
    return shapes


def row(family: str, tokens: int, time_us: float, **keys) -> Row:
    """A vendor row; `keys` are the Row's other columns, blank where not given."""
    fields: Dict[str, Any] = {name: type(BLANK[name])(value)
                              for name, value in {**BLANK, **keys}.items()}
    return Row(family=family, tokens=int(tokens), time_us=float(time_us), source="vendor",
               **fields)


def gemm_rows(frame: pd.DataFrame, gpu: dict) -> List[Row]:
    frame = first_wins(frame, ["gemm_dtype", "m", "n", "k"])
    rows = []
    for dtype, ours in GEMM_DTYPES.items():
        table = frame[frame["gemm_dtype"] == dtype]
        if table.empty:
            continue
        sol = gemm_sol(gpu, dtype)
        floor = [sol(m, n, k) for m, n, k in zip(table["m"], table["n"], table["k"])]
        sites = Sites.of(table.assign(latency=np.maximum(table["latency"], floor)))
        every_m = sorted(set(table["m"].tolist()))
        for (n, k), precisions in sorted(gemm_shapes().items()):
            if ours not in precisions:
                continue
            points: List[Tuple[int, float]]
            if (n, k) in sites.curves:
                points = list(sites.curves[n, k])
            else:
                points = [(m, t) for m in every_m
                          if (t := sites.transfer(m, n, k, sol)) is not None]
            rows += [row("gemm", m, t * 1000, precision=ours, n=n, k=k) for m, t in points]
    return rows


def moe_rows(frame: pd.DataFrame) -> List[Row]:
    """The fastest kernel collected at each shape (TensorRT-LLM's autotuner picks among its
    MoE kernels per shape: the min-latency one wins up to a few thousand tokens)."""
    rows = []
    for m in ROUTINGS:
        shape = _routed(frame, m) & (frame["moe_tp_size"] == 1) \
            & (frame["distribution"] == "balanced") & frame["moe_dtype"].isin(m.dtypes)
        keys = ["moe_dtype", "moe_ep_size", "num_tokens"]
        kept = first_wins(frame[shape], keys + (["kernel_source"] if "kernel_source" in frame
                                                else []))
        fastest = kept.sort_values("latency", kind="stable").drop_duplicates(keys, keep="first")
        rows += [row("moe", r.num_tokens, r.latency * 1000, precision=m.dtypes[r.moe_dtype],
                     n=m.hidden, k=m.inter, experts=m.experts, topk=m.topk, width=r.moe_ep_size)
                 for r in fastest.itertuples()]
    return rows


def _routed(frame: pd.DataFrame, m: Routing) -> pd.Series:
    """The rows of a MoE table at model `m`'s routed-expert shape."""
    return (frame["hidden_size"] == m.hidden) & (frame["inter_size"] == m.inter) \
        & (frame["topk"] == m.topk) & (frame["num_experts"] == m.experts)


def deepep_moe_rows(frame: pd.DataFrame, mode: str) -> List[Row]:
    """SGLang's DeepEP MoE (its `deepepmoe` grouped GEMMs: masked for decode, contiguous for
    prefill), balanced routing; tokens are the EP group's, as in moe_perf."""
    rows = []
    for m in ROUTINGS:
        shape = _routed(frame, m) & (frame["moe_tp_size"] == 1) \
            & (frame["distribution"] == "uniform") & frame["moe_dtype"].isin(m.dtypes)
        kept = first_wins(frame[shape], ["moe_dtype", "moe_ep_size", "num_tokens"])
        rows += [row("moe", r.num_tokens, r.latency * 1000, mode=mode,
                     precision=m.dtypes[r.moe_dtype], n=m.hidden, k=m.inter, experts=m.experts,
                     topk=m.topk, width=r.moe_ep_size) for r in kept.itertuples()]
    return rows


def mla_decode_rows(frame: pd.DataFrame) -> List[Row]:
    frame = frame[frame["num_heads"].isin(HEADS_PER_DEVICE)
                  & frame["kv_cache_dtype"].isin(KV_DTYPES)]
    frame = first_wins(frame.assign(context=frame["isl"] + frame["step"]),
                       ["kv_cache_dtype", "num_heads", "batch_size", "context"])
    return [row("mla_decode", r.batch_size, r.latency * 1000,
                precision=KV_DTYPES[r.kv_cache_dtype], context=r.context, heads=r.num_heads)
            for r in frame.itertuples()]


def mla_prefill_rows(frame: pd.DataFrame) -> List[Row]:
    frame = frame[frame["num_heads"].isin(HEADS_PER_DEVICE) & (frame["batch_size"] == 1)
                  & (frame["mla_dtype"] == "bfloat16") & frame["kv_cache_dtype"].isin(KV_DTYPES)]
    frame = first_wins(frame, ["kv_cache_dtype", "num_heads", "isl"])
    return [row("mla_prefill", r.isl, r.latency * 1000, precision=KV_DTYPES[r.kv_cache_dtype],
                heads=r.num_heads) for r in frame.itertuples()]


def mla_bmm_rows(frame: pd.DataFrame) -> List[Row]:
    frame = frame[frame["num_heads"].isin(HEADS_PER_DEVICE) & frame["bmm_dtype"].isin(KV_DTYPES)
                  & frame["op_name"].isin(BMM_MODES)]
    frame = first_wins(frame, ["op_name", "bmm_dtype", "num_heads", "num_tokens"])
    return [row("mla_bmm", r.num_tokens, r.latency * 1000, mode=BMM_MODES[r.op_name],
                precision=KV_DTYPES[r.bmm_dtype], heads=r.num_heads) for r in frame.itertuples()]


def topology(node_num: int) -> str:
    return "scaleup" if node_num == 1 else "scaleout"


def a2a_rows(frame: pd.DataFrame) -> List[Row]:
    """trtllm's moe_a2a_perf at each model's shape: DeepEP LL and HT, `latency` in
    microseconds."""
    rows = []
    for m in ROUTINGS:
        shape = (frame["hidden_size"] == m.hidden) & (frame["topk"] == m.topk) \
            & (frame["num_experts"] == m.experts) & frame["comm_backend"].isin(A2A_MODES) \
            & frame["comm_dtype"].isin(COMM_DTYPES)
        kept = first_wins(frame[shape], ["comm_backend", "phase", "comm_dtype", "ep_size",
                                         "node_num", "sms", "num_tokens"])
        rows += [row(r.phase, r.num_tokens, r.latency, mode=A2A_MODES[r.comm_backend],
                     precision=COMM_DTYPES[r.comm_dtype], n=m.hidden, experts=m.experts,
                     topk=m.topk, width=r.ep_size, topology=topology(r.node_num))
                 for r in kept.itertuples()]
    return rows


def nvlink_rows(frame: pd.DataFrame) -> List[Row]:
    """trtllm_alltoall_perf at each model's shape: TensorRT-LLM's NVLink all-to-all across a
    multi-node NVLink domain (GB200 NVL72), two-sided as aiconfigurator runs it, `latency` in
    ms: dispatch with its prepare step, combine; one kernel for decode and prefill steps
    alike."""
    return [r for m in ROUTINGS for r in _nvlink_rows(frame, m)]


def _nvlink_rows(frame: pd.DataFrame, m: Routing) -> List[Row]:
    frame = frame[(frame["hidden_size"] == m.hidden) & (frame["topk"] == m.topk)
                  & (frame["num_experts"] == m.experts)
                  & (frame["kernel_source"] == "NVLinkTwoSided")
                  & frame["moe_dtype"].isin(COMM_DTYPES)]
    frame = first_wins(frame, ["op_name", "moe_dtype", "moe_ep_size", "num_tokens"])
    at = {(r.op_name, r.moe_dtype, r.moe_ep_size, r.num_tokens): r.latency
          for r in frame.itertuples()}
    rows = []
    for (op, dtype, ep, tokens), ms in at.items():
        if op == "alltoall_dispatch" and ("alltoall_prepare", dtype, ep, tokens) in at:
            ms += at["alltoall_prepare", dtype, ep, tokens]
        elif op != "alltoall_combine":
            continue
        family = "dispatch" if op == "alltoall_dispatch" else "combine"
        rows += [row(family, tokens, ms * 1000, mode=mode, precision=COMM_DTYPES[dtype],
                     n=m.hidden, experts=m.experts, topk=m.topk, width=ep, topology="scaleup")
                 for mode in ("low_latency", "normal")]
    return rows


def deepep_rows(frame: pd.DataFrame, mode: str, gpus_per_node: int) -> List[Row]:
    """sglang's DeepEP tables: LL (`*_avg_t_us`) or normal (`*_transmit_us + *_notify_us` at
    DEEPEP_NORMAL_SMS); dispatch sends FP8, combine BF16."""
    if mode == "normal":
        frame = frame[frame["dispatch_sms"] == DEEPEP_NORMAL_SMS]
    rows = []
    for m in ROUTINGS:
        kept = first_wins(frame[(frame["hidden_size"] == m.hidden)
                                & (frame["num_topk"] == m.topk)
                                & (frame["num_experts"] == m.experts)], ["node_num", "num_token"])
        for family, precision in (("dispatch", "fp8"), ("combine", "bf16")):
            if mode == "normal":
                times = kept[f"{family}_transmit_us"] + kept[f"{family}_notify_us"]
            else:
                times = kept[f"{family}_avg_t_us"]
            rows += [row(family, r.num_token, t, mode=mode, precision=precision, n=m.hidden,
                         experts=m.experts, topk=m.topk, width=r.node_num * gpus_per_node,
                         topology=topology(r.node_num))
                     for r, t in zip(kept.itertuples(), times) if not math.isnan(t)]
    return rows


def collective_rows(family: str, frame: pd.DataFrame) -> List[Row]:
    """One row per power-of-two token count, per group size and model hidden size; `latency`
    in ms, `message_size` in bf16 elements."""
    frame = first_wins(frame, ["num_gpus", "message_size"])
    rows = []
    for hidden in (HIDDEN, V4_HIDDEN):
        for width, curve in frame.groupby("num_gpus"):
            points = at_tokens(curve["message_size"].to_numpy(float),
                               curve["latency"].to_numpy(float), hidden)
            rows += [row(family, tokens, ms * 1000, precision="bf16", n=hidden, width=width,
                         topology="scaleup") for tokens, ms in points]
    return rows


def v4_attention_rows(frame: pd.DataFrame, family: str, mode: str,
                      topk: Optional["TopkDelta"]) -> List[Row]:
    """DeepSeek-V4-Flash's attention module rows of one collected table (family v4_decode or
    v4_prefill, mode csa or hca), less the topK delta where `topk` calibrates it."""
    kv = frame["kv_cache_dtype"].replace({"fp8_e4m3": "fp8"})
    frame = frame.assign(kv=kv)[(frame["num_heads"] * frame["tp_size"] == V4_HEADS)
                                & (frame["gemm_type"] == "fp8_block") & kv.isin(KV_DTYPES)
                                & (frame["mla_dtype"] == "bfloat16")]
    if family == "v4_prefill":
        frame = frame[frame["batch_size"] == 1]
    frame = first_wins(frame, ["kv", "num_heads", "step", "isl", "batch_size"])
    rows = []
    for r in frame.itertuples():
        if family == "v4_decode":  # one new token over isl + step keys, past_kv = step
            tokens, context = r.batch_size, r.isl + r.step
            delta = topk.at("v2", r.isl + r.step - 1, 1, r.batch_size) if topk else 0.0
        else:
            tokens, context = r.isl, r.step
            delta = topk.at("v1", r.step, r.isl, 1) if topk else 0.0
        ms = r.latency - delta
        if ms <= 0:
            raise DataError(f"{family} {mode}: the topK delta takes the whole {r.latency} ms "
                            f"at batch {r.batch_size}, isl {r.isl}, step {r.step}")
        rows.append(row(family, tokens, ms * 1000, mode=mode, precision=KV_DTYPES[r.kv],
                        context=context, n=V4_HIDDEN, heads=r.num_heads))
    return rows


@dataclass(frozen=True)
class TopkDelta:
    """dsv4_csa_topk_calib_perf: the CSA module's topK timed on degenerate scores (flat) and
    on realistic ones (top_last), per selector (v1 prefill, v2 decode) and (prefix, isl,
    batch); V4-Flash's rows (num_heads is their native count, collected at tp 1)."""
    exact: Dict[str, Dict[Tuple[int, int, int], float]]

    @classmethod
    def of(cls, frame: pd.DataFrame) -> "TopkDelta":
        frame = first_wins(frame[frame["num_heads"] == V4_HEADS],
                           ["step", "isl", "batch_size", "score_mode"])
        at = {(r.score_mode, r.step, r.isl, r.batch_size): r.latency
              for r in frame.itertuples()}
        exact: Dict[str, Dict[Tuple[int, int, int], float]] = {"v1": {}, "v2": {}}
        for (mode, *shape), flat in at.items():
            variant, _, score = mode.partition("_")
            last = at.get((f"{variant}_top_last", *shape))
            if score == "flat" and variant in exact and last is not None:
                exact[variant][tuple(shape)] = max(0.0, flat - last)
        return cls(exact)

    def at(self, variant: str, prefix: int, isl: int, batch: int) -> float:
        """aiconfigurator's delta (perf_database/dsv4.rs, topk_delta_ms): the collected one,
        else interpolated in prefix at each (isl, batch), then in isl, then in batch, each
        linearly and held at its ends; 0 where nothing resolves."""
        exact = self.exact[variant]
        if (prefix, isl, batch) in exact:
            return exact[prefix, isl, batch]

        def in_prefix(i: int, b: int) -> Optional[float]:
            return _held([(p, d) for (p, i2, b2), d in exact.items() if (i2, b2) == (i, b)],
                         prefix)

        def in_isl(b: int) -> Optional[float]:
            isls = sorted({i for _, i, b2 in exact if b2 == b})
            return _held([(i, v) for i in isls if (v := in_prefix(i, b)) is not None], isl)

        batches = sorted({b for _, _, b in exact})
        got = _held([(b, v) for b in batches if (v := in_isl(b)) is not None], batch)
        return max(0.0, got) if got is not None else 0.0


def _held(points: List[Tuple[int, float]], x: int) -> Optional[float]:
    """Linear in x between `points` (repeats averaged), held at the ends; None without any."""
    if not points:
        return None
    merged: Dict[int, List[float]] = {}
    for at, value in points:
        merged.setdefault(at, []).append(value)
    xs = sorted(merged)
    return float(np.interp(x, xs, [sum(merged[a]) / len(merged[a]) for a in xs]))


@dataclass
class Derivation:
    """The table of one profile and stack; the files it lacks; the spikes left out."""
    table: KernelTable
    gaps: List[str]
    spikes: List[Row]


def derive(systems: Path, profile: str, stack: str) -> Derivation:
    system = SYSTEMS[profile]
    spec = read_yaml(systems / f"{system}.yaml")
    data = systems / "data" / system
    current = current_version(systems, system, stack)
    rows: List[Row] = []
    used: List[str] = []
    gaps: List[str] = []

    def read(what: str, folder: Path, filename: str, newest: Optional[str]):
        found = collection(folder, filename, newest)
        if found is None:
            gaps.append(f"{what}: no {filename} under {folder.relative_to(systems)}")
            return None
        used.append(f"{what} {folder.name} {found[0]}")
        return pd.read_parquet(found[1])

    for what, family, filename, derive_rows in (
            ("gemm", "gemm", "gemm_perf.parquet", lambda f: gemm_rows(f, spec["gpu"])),
            ("moe", "moe", "moe_perf.parquet", moe_rows),
            ("mla_decode", "mla", "generation_mla_perf.parquet", mla_decode_rows),
            ("mla_prefill", "mla", "context_mla_perf.parquet", mla_prefill_rows),
            ("mla_bmm", "mla_bmm", "mla_bmm_perf.parquet", mla_bmm_rows),
            ("all_reduce", "comm", "custom_allreduce_perf.parquet",
             lambda f: collective_rows("all_reduce", _graph_only(f)))):
        frame = read(what, data / family / stack, filename, current)
        if frame is not None:
            rows += derive_rows(frame)
    nccl = read("all_gather", data / "comm" / "nccl", "nccl_perf.parquet", None)
    if nccl is not None:
        rows += collective_rows("all_gather", nccl[(nccl["op_name"] == "all_gather")
                                                   & (nccl["nccl_dtype"] == "half")])
    rows += expert_parallel_rows(read, data, stack, current,
                                 int(spec["node"]["num_gpus_per_node"]))
    rows += v4_attention(read, data / "sparse_attention" / stack)
    rows, dropped = tidy(rows)
    source = f"{AIC} {AIC_VERSION} (NVIDIA), collected data: {', '.join(used)}"
    return Derivation(KernelTable(profile, f"{stack} {current}", source, NOTICE, rows), gaps,
                      dropped)


def expert_parallel_rows(read, data: Path, stack: str, current: str, gpus: int) -> List[Row]:
    """The all-to-alls (TensorRT-LLM's, or SGLang's DeepEP in both modes) and SGLang's
    DeepEP grouped GEMMs; `read(what, folder, filename, newest)` a collected table or None."""
    comm = data / "comm" / stack
    if stack == "trtllm":  # the NVLink all-to-all where collected (GB200), else DeepEP's
        frame = read("dispatch/combine nvlink", comm, "trtllm_alltoall_perf.parquet", current)
        if frame is not None:
            return nvlink_rows(frame)
        frame = read("dispatch/combine", comm, "moe_a2a_perf.parquet", current)
        return [] if frame is None else a2a_rows(frame)
    rows: List[Row] = []
    for mode, moe_file, a2a_file in (
            ("low_latency", "wideep_generation_moe_perf.parquet", "wideep_deepep_ll_perf.parquet"),
            ("normal", "wideep_context_moe_perf.parquet", "wideep_deepep_normal_perf.parquet")):
        frame = read(f"moe {mode}", data / "moe" / stack, moe_file, current)
        if frame is not None:
            rows += deepep_moe_rows(frame, mode)
        frame = read(f"dispatch/combine {mode}", comm, a2a_file, current)
        if frame is not None:
            rows += deepep_rows(frame, mode, gpus)
    return rows


def v4_attention(read, folder: Path) -> List[Row]:
    """DeepSeek-V4-Flash's attention modules, each phase and mode, from the newest collection
    (TensorRT-LLM's only one is at aiconfigurator's `next` version); CSA less the topK delta
    where the stack collected its calibration."""
    calib = read("v4 topK calibration", folder, "dsv4_csa_topk_calib_perf.parquet", None)
    topk = None if calib is None else TopkDelta.of(calib)
    rows: List[Row] = []
    for family, phase in (("v4_decode", "generation"), ("v4_prefill", "context")):
        for mode in V4_MODES:
            frame = read(f"{family} {mode}", folder, f"dsv4_{mode}_{phase}_module_perf.parquet",
                         None)
            if frame is not None:
                rows += v4_attention_rows(frame, family, mode, topk if mode == "csa" else None)
    return rows


def _graph_only(frame: pd.DataFrame) -> pd.DataFrame:
    """sglang's custom all-reduce was timed eager and in a CUDA graph; serving runs the graph
    (aiconfigurator drops the eager rows too)."""
    if "backend" not in frame:
        return frame
    return frame[~frame["backend"].str.endswith("_eager")]


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.kernels.aiconfigurator",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, type=Path,
                        help="folder to write <profile>/<stack>.csv under (engine/kernels)")
    args = parser.parse_args(argv)
    try:
        systems = systems_dir()
        for profile in SYSTEMS:
            for stack in STACKS:
                result = derive(systems, profile, stack)
                path = args.out / profile / f"{stack}.csv"
                path.parent.mkdir(parents=True, exist_ok=True)
                write(result.table, path)
                print(f"{path}: {len(result.table.rows)} rows, {path.stat().st_size // 1024} KB")
                for gap in result.gaps:
                    print(f"  {profile} {stack}: {gap}")
                for r in result.spikes:
                    shape = ", ".join(f"{name} {getattr(r, name)}" for name in CURVE_KEYS[1:]
                                      + ("tokens", "context") if getattr(r, name) not in ("", 0))
                    print(f"  {profile} {stack}: left out a spike: {r.family} {shape}: "
                          f"{r.time_us:.1f} us")
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
