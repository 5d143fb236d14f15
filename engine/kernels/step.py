"""A deployment's step terms from a kernel table (docs/modeling.md, "The step from kernel
tables"): for each part of a DeepSeek-V3- or V4-architecture layer, the kernels it runs, the
curve of each at the deployment's shapes, the count a step looks it up at and how many calls a
step makes. A part is timed from the table only when every one of its kernels has a curve;
otherwise the whole part stays a roofline, and `missing` says which curve it lacked.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from .. import _core
from .lookup import Curve, curves_of
from .streams import decode_streams
from .table import CURVE_KEYS, KernelTable

PARTS = ("attention", "dense", "experts", "dispatch", "combine", "allreduce")
# The all-to-alls' kernel modes, and the steps each serves (kernel_step.hpp's When)
A2A_MODES = (("low_latency", "decode_only"), ("normal", "with_prefill"))


@dataclass
class StepTerms:
    terms: List[_core.KernelTerm] = field(default_factory=list)
    timed: Tuple[str, ...] = ()  # parts the table times (in some steps, for the all-to-alls)
    missing: Dict[str, str] = field(default_factory=dict)  # part -> the curve it lacked
    decode_layer_scale: float = 1.0  # the stack's (streams.py)
    aux: bool = False  # some term runs on the second stream in decode steps

    def kernel_step(self, micro_batches: int, mtp_layers_per_layer: float) -> _core.KernelStep:
        return _core.KernelStep(self.terms, micro_batches, mtp_layers_per_layer,
                                self.decode_layer_scale)


@dataclass(frozen=True)
class _Kernel:
    """One kernel of a part: the count it is looked up at, its calls a step; a fused
    GEMM's unfused GEMMs (`split`), summed where a table lacks the fused one (the engine's
    own forward runs them apart: a measured table has those); `within`: a kernel a table
    without its family counts inside another (the engine's own decode attention applies
    the absorbed products row by row: a measured table has no `mla_bmm`); `aux`: a kernel
    a stack may run on a second stream in decode steps (streams.py)."""
    quantity: str
    calls: float
    per_layer: bool = True
    when: str = "always"
    split: Tuple[Tuple, ...] = ()
    within: bool = False
    aux: bool = False


def _key(family: str, **keys) -> Tuple:
    values = {"mode": "", "precision": "", "n": 0, "k": 0, "heads": 0, "experts": 0,
              "topk": 0, "width": 0, "topology": "", **keys, "family": family}
    return tuple(values[c] for c in CURVE_KEYS)


def _describe(key: Tuple) -> str:
    return ", ".join(f"{c}={v}" for c, v in zip(CURVE_KEYS, key) if v not in ("", 0))


def _gemm(precision, n, k, quantity, calls, per_layer=True, split=(), aux=False):
    return _key("gemm", precision=precision, n=n, k=k), _Kernel(
        quantity, calls, per_layer,
        split=tuple(_key("gemm", precision=precision, n=part, k=k) for part in split), aux=aux)


def _kernel(family, quantity, calls, when="always", within=False, **keys):
    return _key(family, **keys), _Kernel(quantity, calls, True, when, within=within)


def _mla(m, d) -> list:
    """DeepSeek-V3's MLA: the low-rank projections, then the absorbed form for decode rows
    (the batched GEMMs around the latent attention) and the MHA form for prefill rows (kv_b
    up-projects their keys), then o_proj."""
    heads, layers, att, h = (m.num_attention_heads // d.attention_tp, m.num_hidden_layers,
                             d.precision["attention"], m.hidden_size)
    q_width = heads * (m.qk_nope_head_dim + m.qk_rope_head_dim)
    bmm = "fp8" if att == "fp4" else att  # FP4 projections keep FP8 absorbed products
    latent = m.kv_lora_rank + m.qk_rope_head_dim
    if m.q_lora_rank:  # q_a fused with kv_a, then q_b up from the low rank
        projections = [_gemm(att, m.q_lora_rank + latent, h, "tokens", layers,
                             split=(m.q_lora_rank, latent)),
                       _gemm(att, q_width, m.q_lora_rank, "tokens", layers)]
    else:
        projections = [_gemm(att, latent, h, "tokens", layers),
                       _gemm(att, q_width, h, "tokens", layers)]
    return [*projections,
            _gemm(att, heads * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank,
                  "prefill_tokens", layers),
            *(_kernel("mla_bmm", "decode_tokens", layers, precision=bmm, heads=heads, mode=mode,
                      within=True) for mode in ("pre", "post")),
            _kernel("mla_decode", "decode_rows", layers, precision=d.precision["kv"],
                    heads=heads),
            _kernel("mla_prefill", "prefill_row", layers, precision=d.precision["kv"],
                    heads=heads),
            _gemm(att, h, heads * m.v_head_dim, "tokens", layers)]


def _v4_attention(m, d) -> list:
    """DeepSeek-V4's attention module whole (its projections, compressor, indexer, attention
    and grouped output), per layer by its compress ratio: CSA (4) or HCA (128); a layer of
    the sliding window alone (0) is timed as HCA, as aiconfigurator times it (no collection
    has the window alone). Decode rows together, each prefill row apart."""
    ratios = Counter(m.layer_compress_ratios)
    layers = {"csa": ratios[4], "hca": ratios[128] + ratios[0]}
    heads = m.num_attention_heads // d.attention_tp
    return [_kernel(family, quantity, layers[mode], precision=d.precision["kv"], heads=heads,
                    n=m.hidden_size, mode=mode)
            for family, quantity in (("v4_decode", "decode_rows"), ("v4_prefill", "prefill_row"))
            for mode in ("csa", "hca")]


# architecture -> its attention's kernels; those a kernel set is declared for
ATTENTION = {"deepseek_v3": _mla, "deepseek_v4": _v4_attention}
ARCHITECTURES = tuple(ATTENTION)


def _dense(m, d) -> list:
    """The dense FFN layers, each MoE layer's shared experts and router (none in a layer
    that routes by token hash), the LM head."""
    dtp, dense, h = d.dense_tp, d.precision["dense"], m.hidden_size
    moe_layers = m.num_hidden_layers - m.first_k_dense_replace
    routed = m.num_hidden_layers - max(m.first_k_dense_replace, m.num_hash_layers)
    shared = m.moe_intermediate_size * m.n_shared_experts // dtp
    out = []
    if m.first_k_dense_replace:
        ffn = m.dense_intermediate_size // dtp
        out += [_gemm(dense, 2 * ffn, h, "tokens", m.first_k_dense_replace, split=(ffn, ffn)),
                _gemm(dense, h, ffn, "tokens", m.first_k_dense_replace)]
    return [*out,
            _gemm(dense, 2 * shared, h, "tokens", moe_layers, split=(shared, shared), aux=True),
            _gemm(dense, h, shared, "tokens", moe_layers, aux=True),
            _gemm("bf16", m.n_routed_experts, h, "tokens", routed),
            _gemm("bf16", m.vocab_size // dtp, h, "logits", 1, per_layer=False)]


def part_kernels(m, d, scaleup_devices: int) -> Dict[str, List[Tuple[Tuple, _Kernel]]]:
    """Each part's kernels for model config `m` under deployment `d`."""
    tp, dtp, ep, h = d.attention_tp, d.dense_tp, d.moe_ep, m.hidden_size
    moe_layers = m.num_hidden_layers - m.first_k_dense_replace
    routing = dict(topk=m.num_experts_per_tok, experts=m.n_routed_experts, width=ep)
    parts = {"attention": ATTENTION[m.architecture](m, d), "dense": _dense(m, d)}
    parts["experts"] = [_kernel("moe", "group_tokens", moe_layers, when=when, mode=mode,
                                precision=d.precision["experts"], n=h,
                                k=m.moe_intermediate_size, **routing)
                        for mode, when in A2A_MODES] if d.moe_tp == 1 else []
    parts["allreduce"] = [_kernel("all_reduce", "tokens",
                                  m.num_hidden_layers * ((tp > 1) + (dtp > 1)), precision="bf16",
                                  n=h, width=max(tp, dtp), topology="scaleup")] \
        if tp > 1 or dtp > 1 else []
    topology = "scaleup" if ep <= scaleup_devices else "scaleout"
    for family in ("dispatch", "combine") if ep > 1 else ():
        parts[family] = [_kernel(family, "sent_tokens", moe_layers, when=when,
                                 precision=d.precision[family], n=h, topology=topology,
                                 mode=mode, **routing) for mode, when in A2A_MODES]
    return parts


def step_terms(table: KernelTable, model_config, deployment, scaleup_devices: int) -> StepTerms:
    """The terms of each part the table covers whole (an all-to-all per kernel mode), run as
    the table's stack runs a decode step (streams.py)."""
    if model_config.architecture not in ARCHITECTURES:
        return StepTerms(missing={p: f"{model_config.architecture}: no kernel set is declared "
                                     "for this architecture" for p in PARTS})
    curves = curves_of(table)
    families = {key[0] for key in curves}
    streams = decode_streams(table.stack)
    aux = bool(streams.shared_beside_routed) and deployment.cuda_graphs
    out = StepTerms(decode_layer_scale=streams.layer_scale.value)
    timed = []
    for part, kernels in part_kernels(model_config, deployment, scaleup_devices).items():
        if not kernels:
            continue
        found = [(at, key, k) for key, k in kernels if k.calls > 0
                 for at, key in _found(curves, families, key, k)]
        lacking = [key for at, key, _ in found if at is None]
        if lacking:
            out.missing[part] = _describe(lacking[0])
        if part not in ("dispatch", "combine"):  # an all-to-all's modes stand alone
            found = [] if lacking else found
        runs = [(at, k, aux and k.aux) for at, _, k in found if at]
        terms = [_term(curves[at[0]], k, part, at[1], at[2], beside) for at, k, beside in runs]
        out.aux = out.aux or any(beside for *_, beside in runs)
        if terms:
            timed.append(part)
        out.terms += terms
    out.timed = tuple(timed)
    return out


def _found(curves: Dict[Tuple, Curve], families: set, key: Tuple, k: _Kernel) -> list:
    """[(how `_resolve` finds a curve or None, the key)] for one kernel: its own curve, or
    its unfused GEMMs' where the table has every one, or nothing where the table counts it
    within another kernel."""
    at = _resolve(curves, key)
    if at is None and k.within and key[0] not in families:
        return []
    if at is None and k.split:
        parts = [(_resolve(curves, part), part) for part in k.split]
        if all(p is not None for p, _ in parts):
            return parts
    return [(at, key)]


def _resolve(curves: Dict[Tuple, Curve], key: Tuple) -> Optional[Tuple[Tuple, float, bool]]:
    """(the curve's key, the count's scale, whether it stands in for another shape) for
    `key`, or None where the table has nothing for it:

    - experts or an all-to-all at an EP width the table lacks: the nearest width it has,
      the experts at the same tokens per device (the count scaled by the widths' ratio),
      every lookup flagged as extrapolated;
    - grouped experts in a DeepEP layout, in a table that times its experts in no DeepEP
      layout at all: the stack's one grouped-GEMM kernel, which runs beside every
      all-to-all (TensorRT-LLM's). A table with DeepEP layouts (SGLang's) has a kernel
      apart for the experts without DeepEP, whose time does not shrink with the EP width:
      never a stand-in for DeepEP's, so a precision it lacks there stays a roofline."""
    if key in curves:
        return key, 1.0, False
    values = dict(zip(CURVE_KEYS, key))
    near = _near_width(curves, values, key)
    if near is None and values["family"] == "moe" and values["mode"] \
            and not any(other[0] == "moe" and other[1] for other in curves):
        return _resolve(curves, _with(values, mode=""))
    return near


def _near_width(curves: Dict[Tuple, Curve], values: Dict[str, object],
                key: Tuple) -> Optional[Tuple[Tuple, float, bool]]:
    if values["family"] not in ("moe", "dispatch", "combine"):
        return None
    width = values["width"]
    widths = [dict(zip(CURVE_KEYS, other))["width"] for other in curves
              if _with(dict(zip(CURVE_KEYS, other)), width=width) == key]
    if not widths:
        return None
    near = min(widths, key=lambda w: (abs(math.log(w / width)), w))
    scale = near / width if values["family"] == "moe" else 1.0
    return _with(values, width=near), scale, True


def _with(values: Dict[str, object], **changed) -> Tuple:
    return tuple(changed.get(c, values[c]) for c in CURVE_KEYS)


def _term(curve: Curve, k: _Kernel, part: str, scale: float = 1.0,
          substitute: bool = False, aux: bool = False) -> _core.KernelTerm:
    times = [t for row in curve.times_us for t in row]
    return _core.KernelTerm(
        _core.KernelCurve([float(t) for t in curve.tokens], [float(c) for c in curve.contexts],
                          times),
        getattr(_core.Quantity, k.quantity), getattr(_core.Part, part),
        getattr(_core.When, k.when), float(k.calls), k.per_layer, scale, substitute, aux)


def find(table: KernelTable, family: str, **keys) -> Optional[Curve]:
    """The curve of `family` at `keys` (CURVE_KEYS; the rest 0 or empty), or None."""
    return curves_of(table).get(_key(family, **keys))
