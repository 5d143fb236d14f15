"""Kernel calibration: the engine's own ops (engine/model.py) timed on the device at hand
over a grid of shapes, as the rows of a kernel table (engine/kernels/table.py;
docs/calibrate.md). Every op runs at bf16, the precision of every row.

- gemm: each projection of the forward at the model's shapes, one curve per (n, k): the
  attention's, the dense FFN's, the shared experts', the router's, MTP's eh_proj and the
  LM head, each the model's own nn.Linear on `tokens` rows;
- moe: one MoE layer as MoE.forward runs it without an EP group (width 1), on `tokens`
  rows before top-k: its router (also a gemm row) and routed experts; its shared experts
  are gemm rows only;
- mla_decode: MLAttention.forward's per-row attention in absorbed form over the paged
  latent cache (W_UK and W_UV included: the engine applies them row by row), `tokens`
  sequences of `context` keys each;
- mla_prefill: the same in MHA form (each key's latent up-projected by wkv_b), one
  sequence of `tokens` new tokens after `context` cached ones;
- all_reduce, all_gather: where torch.distributed is initialised over more than one rank,
  `tokens` rows of the hidden size from each rank (width: the world size).

A time is the median of `repeats` calls after WARMUP ones: the device's timing events
around each call on CUDA or an NPU, perf_counter_ns on the CPU.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import statistics
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist
from torch import nn

from engine import __version__
from engine.devices import DeviceInfo
from engine.kernels.table import KernelTable, Row
from engine.model import MLAttention, MoE, SwiGLU, gather_latent
from engine.model_config import ModelConfig
from engine.step_parts import PartTimer

DTYPE, PRECISION = torch.bfloat16, "bf16"
WARMUP = 3
DECODE_CONTEXTS = (512, 2048, 8192)
# MLAttention attends row by row in Python: past a few hundred sequences a decode call is
# launch-bound and only slower to time, so the decode grid stops here
DECODE_SEQUENCES_MAX = 256
BLOCK_SIZE = 16  # the scheduler's default (engine/scheduler_config.pyi)
NOTICE = "measured; no third-party data"
FAMILY_ORDER = ("gemm", "moe", "mla_decode", "mla_prefill", "all_reduce", "all_gather")


class CalibrationError(RuntimeError):
    """A shape that could not be timed (the device ran out of memory); str() says which."""


@dataclass(frozen=True)
class Grid:
    tokens: Tuple[int, ...]  # gemm, moe, mla_prefill and the collectives
    decode_sequences: Tuple[int, ...]  # mla_decode
    decode_contexts: Tuple[int, ...]
    prefill_contexts: Tuple[int, ...]  # 0 (a fresh prompt), then the decode contexts


def powers_of_two(cap: int) -> Tuple[int, ...]:
    """1, 2, 4, ... up to `cap`."""
    return tuple(1 << i for i in range(cap.bit_length()))


def make_grid(tokens_max: int, contexts: Sequence[int] = DECODE_CONTEXTS) -> Grid:
    """The grid up to `tokens_max` tokens, over decode's KV lengths `contexts`."""
    if tokens_max < 1 or not contexts or min(contexts) < 1:
        raise ValueError(f"a grid needs tokens_max >= 1 and contexts >= 1, got {tokens_max}, "
                         f"{list(contexts)}")
    decode = tuple(sorted(set(contexts)))
    return Grid(powers_of_two(tokens_max), powers_of_two(min(tokens_max, DECODE_SEQUENCES_MAX)),
                decode, (0,) + decode)


class Clock:
    """The median microseconds of a call on the device."""

    def __init__(self, backend: str, repeats: int) -> None:
        self.repeats = repeats
        self._accel = getattr(torch, backend) if backend in ("cuda", "npu") else None

    def median_us(self, op: Callable[..., object], *args, **kwargs) -> float:
        """`op(*args, **kwargs)`'s median."""
        call = lambda: op(*args, **kwargs)
        for _ in range(WARMUP):
            call()
        if self._accel is None:
            times = []
            for _ in range(self.repeats):
                begin = time.perf_counter_ns()
                call()
                times.append((time.perf_counter_ns() - begin) / 1e3)
        else:
            self._accel.synchronize()
            events = []
            for _ in range(self.repeats):
                begin = self._accel.Event(enable_timing=True)
                end = self._accel.Event(enable_timing=True)
                begin.record()
                call()
                end.record()
                events.append((begin, end))
            self._accel.synchronize()
            times = [begin.elapsed_time(end) * 1e3 for begin, end in events]
        # a table's times are > 0: a call under the clock's resolution reads as its 1 ns
        return max(statistics.median(times), 1e-3)


def measured(family: str, tokens: int, time_us: float, **keys) -> Row:
    """A row of `family` at bf16: `keys` given, every other key 0 or empty."""
    row = Row(family=family, mode="", precision=PRECISION, tokens=tokens, context=0, n=0, k=0,
              heads=0, experts=0, topk=0, width=0, topology="", time_us=time_us,
              source="measured")
    return dataclasses.replace(row, **keys)


@contextmanager
def building(device) -> Iterator[None]:
    """Modules and tensors made in the block are made on `device`, at bf16."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(DTYPE)
    try:
        with torch.device(device):
            yield
    finally:
        torch.set_default_dtype(previous)


@contextmanager
def shape(family: str, **at) -> Iterator[None]:
    """CalibrationError naming the family and shape where the device runs out of memory."""
    try:
        yield
    except RuntimeError as e:  # torch.OutOfMemoryError on CUDA; a RuntimeError on an NPU
        if "out of memory" not in str(e).lower():
            raise
        where = ", ".join(f"{k} {v}" for k, v in at.items())
        raise CalibrationError(f"{family} at {where}: the device ran out of memory (lower "
                               f"--tokens-max or --contexts)") from None


def projections(cfg: ModelConfig, attn: MLAttention) -> Dict[Tuple[int, int], nn.Linear]:
    """The forward's projections by (n, k) = (out, in) features, one module for each
    shape: the attention's (`attn`), the dense FFN's, the shared experts', the router's,
    eh_proj's, the LM head's. The routed experts are the moe rows'."""
    h = cfg.hidden_size
    modules: List[nn.Module] = [attn, nn.Linear(h, cfg.vocab_size, bias=False)]
    if cfg.first_k_dense_replace:
        modules.append(SwiGLU(h, cfg.dense_intermediate_size))
    if cfg.first_k_dense_replace < cfg.num_hidden_layers:
        modules.append(nn.Linear(h, cfg.n_routed_experts, bias=False))
        if cfg.n_shared_experts:
            modules.append(SwiGLU(h, cfg.moe_intermediate_size * cfg.n_shared_experts))
    if cfg.num_nextn_predict_layers:
        modules.append(nn.Linear(2 * h, h, bias=False))
    found: Dict[Tuple[int, int], nn.Linear] = {}
    for module in modules:
        for linear in module.modules():
            if isinstance(linear, nn.Linear):
                found.setdefault((linear.out_features, linear.in_features), linear)
    return found


def gemm_rows(clock: Clock, linears: Dict[Tuple[int, int], nn.Linear],
              tokens: Sequence[int]) -> List[Row]:
    rows = []
    for (n, k), linear in sorted(linears.items()):
        for m in tokens:
            with shape("gemm", n=n, k=k, tokens=m):
                x = torch.randn(m, k)
                rows.append(measured("gemm", m, clock.median_us(linear, x), n=n, k=k))
    return rows


def moe_rows(clock: Clock, cfg: ModelConfig, tokens: Sequence[int]) -> List[Row]:
    moe = MoE(cfg, PartTimer())
    moe.shared = None  # timed as gemm rows
    keys = dict(n=cfg.hidden_size, k=cfg.moe_intermediate_size, experts=cfg.n_routed_experts,
                topk=cfg.num_experts_per_tok, width=1)
    rows = []
    for m in tokens:
        with shape("moe", tokens=m):
            x = torch.randn(m, cfg.hidden_size)
            rows.append(measured("moe", m, clock.median_us(moe, x), **keys))
    return rows


def attend_rows(attn: MLAttention, q: torch.Tensor, cache: torch.Tensor,
                query_start: Sequence[int], seqlen_k: Sequence[int], tables: torch.Tensor,
                decode: bool) -> torch.Tensor:
    """MLAttention.forward's attention after its projections and cache write: each row's
    latent gathered through its block table, then attended in absorbed (decode) or MHA
    (prefill) form; q is the rotated query, [tokens, heads, qk_head_dim]."""
    cfg, mla = attn.cfg, attn.cfg.mla
    nope = mla.qk_nope_head_dim
    q_nope, q_rope = q[..., :nope], q[..., nope:]
    out = torch.empty(q.shape[0], cfg.num_attention_heads, mla.v_head_dim)
    attend = attn._absorbed if decode else attn._mha
    for row, (start, end) in enumerate(zip(query_start[:-1], query_start[1:])):
        k = seqlen_k[row]
        ctx = gather_latent(cache, tables[row], k, BLOCK_SIZE).to(q.dtype)
        out[start:end] = attend(q_nope[start:end], q_rope[start:end], ctx, k)
    return out


def _paged(cfg: ModelConfig, lengths: Sequence[int]) -> Tuple[torch.Tensor, torch.Tensor]:
    """A latent cache [slots, kv_cache_dim] holding each sequence in blocks of its own, and
    the block tables [sequences, blocks]."""
    blocks = [-(-k // BLOCK_SIZE) for k in lengths]
    cache = torch.randn(sum(blocks) * BLOCK_SIZE, cfg.kv_cache_dim)
    tables = torch.full((len(lengths), max(blocks)), -1, dtype=torch.long)
    first = 0
    for row, count in enumerate(blocks):
        tables[row, :count] = torch.arange(first, first + count)
        first += count
    return cache, tables


def mla_decode_rows(clock: Clock, attn: MLAttention, grid: Grid) -> List[Row]:
    cfg, rows = attn.cfg, []
    for context in grid.decode_contexts:
        for b in grid.decode_sequences:
            with shape("mla_decode", tokens=b, context=context):
                cache, tables = _paged(cfg, [context] * b)
                q = torch.randn(b, cfg.num_attention_heads, cfg.qk_head_dim)
                time_us = clock.median_us(attend_rows, attn, q, cache, list(range(b + 1)),
                                          [context] * b, tables, decode=True)
                rows.append(measured("mla_decode", b, time_us, context=context,
                                     heads=cfg.num_attention_heads))
    return rows


def mla_prefill_rows(clock: Clock, attn: MLAttention, grid: Grid) -> List[Row]:
    cfg, rows = attn.cfg, []
    for context in grid.prefill_contexts:
        for t in grid.tokens:
            with shape("mla_prefill", tokens=t, context=context):
                cache, tables = _paged(cfg, [context + t])
                q = torch.randn(t, cfg.num_attention_heads, cfg.qk_head_dim)
                time_us = clock.median_us(attend_rows, attn, q, cache, [0, t], [context + t],
                                          tables, decode=False)
                rows.append(measured("mla_prefill", t, time_us, context=context,
                                     heads=cfg.num_attention_heads))
    return rows


def distributed_world() -> Optional[Tuple[int, int]]:
    """(rank, world size) where torch.distributed is initialised over more than one rank."""
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return dist.get_rank(), dist.get_world_size()
    return None


def topology() -> str:
    """scaleup where every rank is on this host (torchrun's LOCAL_WORLD_SIZE), scaleout
    where some are not, empty where the launcher does not say."""
    local, world = os.environ.get("LOCAL_WORLD_SIZE"), os.environ.get("WORLD_SIZE")
    if not local or not world:
        return ""
    return "scaleup" if local == world else "scaleout"


def collective_rows(clock: Clock, cfg: ModelConfig, tokens: Sequence[int]) -> List[Row]:
    """all_reduce and all_gather of `tokens` rows of the hidden size per rank; every rank
    calls this with the same arguments."""
    world, h = dist.get_world_size(), cfg.hidden_size
    # all_gather_single: all_gather_into_tensor's newer name (the old one warns there)
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    keys = dict(n=h, width=world, topology=topology())
    rows = []
    for m in tokens:
        x = torch.zeros(m, h)  # summed in place call after call: zeros stay finite
        gathered = torch.empty(world * m, h)
        for family, op, args in (("all_reduce", dist.all_reduce, (x,)),
                                 ("all_gather", gather, (gathered, x))):
            with shape(family, tokens=m):
                dist.barrier()
                rows.append(measured(family, m, clock.median_us(op, *args), **keys))
    return rows


def calibrate(cfg: ModelConfig, device: DeviceInfo, grid: Grid, repeats: int,
              say: Callable[[str], None] = lambda line: None) -> List[Row]:
    """Every family's rows on `device` (torch_npu loaded for an NPU). Over several ranks each
    times the collectives; only rank 0 the rest (the others return the collectives' rows)."""
    clock = Clock(device.backend, repeats)
    world = distributed_world()
    rows: List[Row] = []
    with torch.inference_mode(), building(device.torch_device):
        if world is not None:
            say(f"all_reduce, all_gather: {len(grid.tokens)} tokens over {world[1]} ranks")
            rows += collective_rows(clock, cfg, grid.tokens)
            if world[0] != 0:
                return rows
        attn = MLAttention(cfg, 0)
        linears = projections(cfg, attn)
        say(f"gemm: {len(linears)} shapes x {len(grid.tokens)} tokens")
        rows += gemm_rows(clock, linears, grid.tokens)
        del linears  # the LM head and FFNs: their memory is the MoE layer's next
        if cfg.first_k_dense_replace < cfg.num_hidden_layers:
            say(f"moe: {len(grid.tokens)} tokens")
            rows += moe_rows(clock, cfg, grid.tokens)
        say(f"mla_decode: {len(grid.decode_sequences)} sequences x "
            f"{len(grid.decode_contexts)} contexts")
        rows += mla_decode_rows(clock, attn, grid)
        say(f"mla_prefill: {len(grid.tokens)} tokens x {len(grid.prefill_contexts)} contexts")
        rows += mla_prefill_rows(clock, attn, grid)
    return rows


def runtime(device: DeviceInfo) -> Tuple[str, str]:
    """(the device runtime, "CUDA 12.8" or "CANN 8.3.RC1"; its driver's version), empty
    and "unknown" where the runtime or the driver cannot say."""
    if device.backend == "cuda":
        return f"CUDA {torch.version.cuda}", _nvidia_driver()
    if device.backend == "npu":
        return f"CANN {_cann('CANN') or 'unknown'}", _cann("DRIVER") or "unknown"
    return "", ""


def _nvidia_driver() -> str:
    try:
        import pynvml
        pynvml.nvmlInit()
        try:
            return str(pynvml.nvmlSystemGetDriverVersion())
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no nvidia-ml-py, or NVML not loadable: the table still stands
        return "unknown"


def _cann(module: str) -> str:
    try:
        from torch_npu.utils import get_cann_version
        return str(get_cann_version(module=module))
    except Exception:  # torch_npu older than the call, or CANN before 8.1.RC1
        return ""


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def kernel_table(rows: List[Row], device: DeviceInfo, today: Optional[datetime.date] = None
                 ) -> KernelTable:
    """The rows with the table's `# key: value` lines: the device's name as the profile,
    steptrace's, torch's and the runtime's versions as the stack."""
    name, torch_version = _one_line(device.name), torch.__version__
    runtime_label, driver = runtime(device)
    stack = " ".join(filter(None, (f"steptrace {__version__}", f"torch {torch_version}",
                                   runtime_label)))
    day = (today or datetime.datetime.now(datetime.timezone.utc).date()).isoformat()
    parts = [f"measured by steptrace calibrate on {name}"]
    if device.backend != "cpu":
        parts.append(f"driver {driver}")
    parts.append(f"torch {torch_version}")
    if runtime_label:
        parts.append(runtime_label)
    parts.append(day)
    return KernelTable(profile=name, stack=_one_line(stack), source=", ".join(parts),
                       notice=NOTICE, rows=rows)
