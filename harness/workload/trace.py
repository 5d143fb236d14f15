"""The trace a workload names (a file, or a generator), scaled and limited as it asks."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import pandas as pd

from ..traces import generate as arrivals
from ..traces.generate import length_dist
from ..traces.read import TraceError, read_trace
from ..traces.session_gen import Fanout, Shape, gap_dist, generate_sessions
from ..traces.session_readers import SESSION_FORMATS, read_session_file
from ..traces.shared_prefix import shared_prefix
from .load import Workload
from .views import TraceGenerateKeys

TraceLoadError = TraceError


@dataclass
class WorkloadTrace:
    df: pd.DataFrame  # arrival_s (scaled, from 0), prompt_len, max_new_tokens
    dropped: dict = field(default_factory=dict)  # reason -> rows dropped while reading
    sha256: Optional[str] = None  # of the trace file; None when generated
    hash_block_size: Optional[int] = None  # tokens per hash id, when df has hash_ids


def load_workload_trace(workload: Workload) -> WorkloadTrace:
    spec, seeds, g = workload.trace, workload.seeds, workload.trace.generate
    dropped: dict = {}
    if g is not None and g.sessions is not None:
        df, sha256 = generated_sessions(g, workload), None
    elif g is not None:
        df = arrivals.generate(g.requests, g.rate, g.arrival, g.burstiness,
                               prompt=length_dist(g.prompt), output=length_dist(g.output),
                               arrival_seed=seeds.arrivals, length_seed=seeds.lengths)
        prefix = g.shared_prefix
        if prefix.groups is not None:
            df = shared_prefix(df, prefix.groups, prefix.tokens, workload.engine.block_size,
                               seeds.lengths)
        sha256 = None
    elif spec.format in SESSION_FORMATS:
        result = workload.trace_read or read_session_file(
            workload.trace_file, spec.format, spec.hash_block_size, workload.engine.block_size)
        df, dropped, sha256 = result.df, result.dropped, result.sha256
    else:  # as validation read it, or read again as it would
        result = workload.trace_read or read_trace(
            workload.trace_file, spec.format, drop_bad_rows=spec.drop_bad_rows,
            limit=spec.limit, hash_block_size=spec.hash_block_size)
        df, dropped, sha256 = result.df, result.dropped, result.sha256
    block = df.attrs.get("hash_block_size") if "hash_ids" in df.columns else None
    if spec.limit is not None:
        df = df.iloc[:spec.limit]
    offline = workload.load.mode == "offline"  # every request at once
    df = df.assign(arrival_s=0.0 if offline else df["arrival_s"] * spec.time_scale)
    df = df.reset_index(drop=True)
    return WorkloadTrace(df, dropped, sha256, block)


def generated_sessions(g: TraceGenerateKeys, workload: Workload) -> pd.DataFrame:
    """trace.generate.sessions' session frame, hash ids in the engine's blocks."""
    s, seeds = g.sessions, workload.seeds
    assert s is not None
    shape = Shape(turns=length_dist(s.turns), system_prompt=s.system_prompt,
                  input=length_dist(s.input), output=length_dist(g.output),
                  tool_gap=gap_dist(s.tool_gap), user_gap=gap_dist(s.user_gap),
                  tool_share=s.tool_share,
                  fanout=Fanout(s.fanout.probability, s.fanout.children, s.fanout.turns))
    return generate_sessions(s.count, shape, rate=g.rate, arrival=g.arrival,
                             burstiness=g.burstiness, block_size=workload.engine.block_size,
                             arrival_seed=seeds.arrivals, length_seed=seeds.lengths)
