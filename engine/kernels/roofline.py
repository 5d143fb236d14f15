"""Roofline kernel tables: for a device with no collected kernel data (Ascend), each kernel
a deployment runs timed as a roofline of its own FLOPs and bytes, at an efficiency per
family (the profile's `family_efficiency`). `gemm` is the cube units' large matrix
products, GEMMs, grouped experts and prefill attention; `decode_attention` the absorbed
MLA decode and its batched products, bound by the vector units and the latent reads. The
rows are made for the deployment at hand, over the same grid a measured table has, so the
step looks them up as any table (docs/modeling.md, "Roofline tables"). The all-to-alls and
all-reduces are left to the link model.
"""

from __future__ import annotations

import math
from typing import Callable, Dict, List

from ..deployment import BYTES, ROOFLINE
from ..devices.profile import DeviceProfile
from .step import ARCHITECTURES, part_kernels
from .table import CURVE_KEYS, KernelTable, Row

TOKENS = tuple(2 ** i for i in range(21))  # 1 .. 1,048,576
CONTEXTS = tuple(2 ** i for i in range(7, 18))  # 128 .. 131,072 keys
ACTIVATION = 2.0  # bytes: BF16 activations in and out
FAMILY_OF = {"gemm": "gemm", "moe": "gemm", "mla_prefill": "gemm",
             "mla_decode": "decode_attention", "mla_bmm": "decode_attention"}


def _gemm(v, t, m):  # (FLOPs, weight and activation bytes) of one call
    return 2 * t * v["n"] * v["k"], v["n"] * v["k"] * BYTES[v["precision"]] + \
        t * (v["n"] + v["k"]) * ACTIVATION


def _moe(v, t, m):
    local = v["experts"] / v["width"]  # routed experts of one device
    routed = t * v["topk"] / v["width"]  # (token, expert) pairs it computes
    touched = local * -math.expm1(-routed / local)
    expert = 3 * v["n"] * v["k"]
    return 2 * routed * expert, touched * expert * BYTES[v["precision"]] + \
        routed * 2 * v["n"] * ACTIVATION


def _mla_decode(v, t, m, context):
    latent = m.kv_lora_rank + m.qk_rope_head_dim
    return 2 * t * v["heads"] * context * (latent + m.kv_lora_rank), \
        t * context * latent * BYTES[v["precision"]]


def _mla_bmm(v, t, m):
    weights = v["heads"] * m.qk_nope_head_dim * m.kv_lora_rank
    return 2 * t * weights, weights * BYTES[v["precision"]] + \
        t * v["heads"] * (m.qk_nope_head_dim + m.kv_lora_rank) * ACTIVATION


def _mla_prefill(v, t, m, context):
    width = 2 * m.qk_nope_head_dim + m.qk_rope_head_dim + m.v_head_dim  # q.k and p.v
    pairs = t * (t + 1) / 2 + t * context
    return 2 * v["heads"] * pairs * width, (t + context) * v["heads"] * width * ACTIVATION


WORK: Dict[str, Callable] = {"gemm": _gemm, "moe": _moe, "mla_bmm": _mla_bmm}
WITH_CONTEXT: Dict[str, Callable] = {"mla_decode": _mla_decode, "mla_prefill": _mla_prefill}


def roofline_table(profile: DeviceProfile, model_config, deployment,
                   scaleup_devices: int) -> KernelTable:
    """Every kernel the deployment runs but its collectives, at TOKENS (and CONTEXTS for
    the attention), each a roofline at its family's efficiency."""
    if model_config.architecture not in ARCHITECTURES:
        return KernelTable(profile.name, ROOFLINE, "no kernel set for the architecture",
                           "none", [])
    efficiency = {f: e.value for f, e in profile.family_efficiency.items()}
    bandwidth = profile.figure("hbm_tb_s") * 1e12 * profile.memory_efficiency.value
    rows: List[Row] = []
    for kernels in part_kernels(model_config, deployment, scaleup_devices).values():
        for key, _ in kernels:
            v = dict(zip(CURVE_KEYS, key))
            family = v["family"]
            if family not in FAMILY_OF:
                continue
            # MLA's attention computes at the deployment's attention precision (its rows'
            # precision is the KV cache's); a BF16 GEMM (router, LM head) on a device with no
            # BF16 peak, at the dense part's
            compute = deployment.precision["attention"] if family in WITH_CONTEXT \
                else v["precision"]
            if profile.peak_tflops[compute] is None:
                compute = deployment.precision["dense"]
            peak = profile.peak(compute) * 1e12 * efficiency[FAMILY_OF[family]]
            for context in (CONTEXTS if family == "mla_decode" else (0,)):
                for t in TOKENS:
                    flops, nbytes = WITH_CONTEXT[family](v, t, model_config, context) \
                        if family in WITH_CONTEXT else WORK[family](v, t, model_config)
                    seconds = max(flops / peak, nbytes / bandwidth)
                    rows.append(Row(**{**v, "tokens": t, "context": context,
                                       "time_us": seconds * 1e6, "source": "roofline"}))
    rows = list({(r.curve, r.context, r.tokens): r for r in rows}.values())
    shares = " and ".join(f"{f} {e.value:g} ({e.kind})"
                          for f, e in profile.family_efficiency.items())
    return KernelTable(profile.name, ROOFLINE, f"{profile.name}'s peaks and bandwidth at "
                       f"{shares} of peak (family_efficiency)", "derived from the profile's "
                       "figures", rows)
