"""A deployment's front estimated from its modeled step alone, without a replay
(docs/frontier.md, "Pruning"): its decode step at a ladder of batch sizes, each rank full,
every sequence at the trace's mean decode context; its prefill rate from one full prefill
step. Co-located, an instance shares its time between the two; disaggregated, each decode
instance is fed by as many prefill instances as its output rate needs (the pools'
balanced rates, which also set the instance counts the search runs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Dict, List, Optional, Tuple

from engine import EngineConfig, LLMEngine

BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)  # sequences per rank


@dataclass(frozen=True)
class Lengths:
    """The trace's mean prompt and output tokens."""

    prompt: float
    output: float


@dataclass(frozen=True)
class Estimate:
    """(tok/s per user, output tok/s per device) at each batch size of the ladder, and for
    P/D the prefill instances one decode instance needs at the largest."""

    points: Tuple[Tuple[float, float], ...]
    prefill_per_decode: Optional[float] = None


def tokens_per_step(mtp: int, acceptance: float) -> float:
    """Expected tokens a row gains a decode step: one, and each leading draft accepted."""
    return sum(acceptance ** i for i in range(mtp + 1))


_STEPS: Dict[str, Tuple[float, bool]] = {}  # an engine's first step, by its call (below)


def first_step(config: EngineConfig, rows: int, prompt: int, outputs: int,
               batch: int) -> float:
    """The first step of an engine of `config` given `rows` requests of `prompt` tokens, in
    s; RuntimeError unless every DP rank ran `batch` rows of one kind. Once per distinct
    call: candidates share instances (a P/D pool is a co-located candidate's shape;
    configs hold dicts, so the call is keyed by its repr)."""
    key = repr((config, rows, prompt, outputs))
    if key not in _STEPS:
        engine = LLMEngine(config)
        for i in range(rows):
            engine.add_request(i, prompt_len=prompt, max_new_tokens=outputs)
        step = engine.step()
        full = all(len(b.kind) == batch and (b.kind == b.kind[0]).all()
                   for b in step.plan.batches)
        _STEPS[key] = (step.forward_ns / 1e9, full)
    seconds, full = _STEPS[key]
    if not full:
        raise RuntimeError(f"the estimate's first step is not {batch} rows on every rank")
    return seconds


def decode_step_s(config: EngineConfig, batch: int, context: int) -> float:
    """The modeled step of `config`'s instance with every DP rank decoding `batch` rows over
    `context` keys (a completion engine's first step)."""
    s = config.scheduler
    rows = batch * s.dp_size
    scheduler = replace(s, engine_type="completion", max_num_seqs=batch, mixed_batches=False,
                        overlap=False, max_num_batched_tokens=max(batch * (1 + s.num_mtp), 2),
                        num_kv_blocks=rows * (context // s.block_size + 2 + s.num_mtp),
                        prefix_caching=False)
    return first_step(replace(config, scheduler=scheduler), rows, max(context - 1, 1),
                      s.num_mtp + 2, batch)


def prefill_rate(config: EngineConfig, prompt: int) -> float:
    """Input tokens per second of `config`'s instance prefilling alone: every rank one
    full prefill step of `prompt`-token prompts (one chunk of it, where it is longer)."""
    s = config.scheduler
    length = min(prompt, s.max_num_batched_tokens)
    n = max(s.max_num_batched_tokens // length, 1)
    rows = n * s.dp_size
    scheduler = replace(s, engine_type="prompt", max_num_seqs=n, mixed_batches=False,
                        overlap=False, num_kv_blocks=rows * (length // s.block_size + 2),
                        prefix_caching=False, num_mtp=0)
    return rows * length / first_step(replace(config, scheduler=scheduler), rows, length, 1, n)


def batches(cap: int) -> List[int]:
    return [b for b in BATCHES if b < cap] + [cap]


def colocated(config: EngineConfig, devices: int, lengths: Lengths,
              acceptance: float) -> Estimate:
    """An instance sharing its time between decoding at each batch size and prefilling the
    prompts its output rate brings: output rate 1 / (1 / decode + (prompt / output) /
    prefill)."""
    s = config.scheduler
    per_step = tokens_per_step(s.num_mtp, acceptance)
    context = int(lengths.prompt + lengths.output / 2)
    prefill = prefill_rate(config, int(lengths.prompt))
    points = []
    for b in batches(s.max_num_seqs):
        step = decode_step_s(config, b, context)
        decode = s.dp_size * b * per_step / step
        rate = 1 / (1 / decode + (lengths.prompt / lengths.output) / prefill)
        points.append((rate / (s.dp_size * b), rate / devices))
    return Estimate(tuple(points))


def disaggregated(prefill: EngineConfig, prefill_devices: int, decode: EngineConfig,
                  decode_devices: int, lengths: Lengths, acceptance: float) -> Estimate:
    """A decode instance at each batch size with the prefill instances its output rate
    needs, fractions of one counted as fractions of its devices."""
    s = decode.scheduler
    per_step = tokens_per_step(s.num_mtp, acceptance)
    context = int(lengths.prompt + lengths.output / 2)
    instance_rate = prefill_rate(prefill, int(lengths.prompt))
    points, need = [], math.nan
    for b in batches(s.max_num_seqs):
        step = decode_step_s(decode, b, context)
        rate = s.dp_size * b * per_step / step
        need = rate * lengths.prompt / lengths.output / instance_rate
        points.append((per_step / step, rate / (decode_devices + need * prefill_devices)))
    return Estimate(tuple(points), need)
