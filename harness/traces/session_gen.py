"""Generated session traces (harness/traces/sessions.py): agentic sessions of a long shared
system prompt and a growing context, each turn after the first following a tool call or
the user, with optional sub-agent fan-out.

A session has `turns` turns (drawn per session); its root's prompt is the system prompt
and the first input. Each later turn is the next of the one before, of kind tool with
probability `tool_share` (its gap from `tool_gap`), else user (from `user_gap`). With
probability `fanout.probability` a main turn, the last one excepted, spawns
`fanout.children` sub-agents, starting together after one gap, each a chain of
`fanout.turns` turns (gaps from `tool_gap`), which the session's next turn waits for.
Session starts follow `arrival` at `rate` sessions/s (harness/traces/generate.py's
schedules). Deterministic for the seeds: arrivals from arrival_seed, the rest from
length_seed.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .generate import LengthDist, _arrivals
from .read import TraceError
from .sessions import GAP_CATEGORIES, GAP_KINDS, KEYS, tree_frame

GAP_DISTS = ("fixed", "exponential", "lognormal")


@dataclass(frozen=True)
class GapDist:
    """Think or tool time, s: {fixed: S}, {exponential: {mean_s}}, {lognormal: {median_s,
    sigma}}."""

    kind: str
    a: float = 0.0  # fixed: the value; exponential: the mean; lognormal: the median
    sigma: float = 0.0

    def sample(self, rng: np.random.Generator) -> float:
        if self.kind == "fixed":
            return self.a
        if self.kind == "exponential":
            return float(rng.exponential(self.a))
        return float(rng.lognormal(np.log(self.a), self.sigma))


def gap_dist(spec) -> GapDist:
    """The GapDist a `{fixed: S}`, `{exponential: {mean_s: S}}` or `{lognormal: {median_s:
    S, sigma: X}}` mapping names; TraceError if it names none."""
    if not isinstance(spec, dict) or len(spec) != 1 or next(iter(spec)) not in GAP_DISTS:
        raise TraceError(f"a gap distribution: expected one of {{fixed: S}}, {{exponential: "
                         f"{{mean_s: S}}}}, {{lognormal: {{median_s: S, sigma: X}}}}, got "
                         f"{spec!r}")
    (kind, arg), = spec.items()
    need = {"fixed": (), "exponential": ("mean_s",), "lognormal": ("median_s", "sigma")}[kind]
    values = [arg] if kind == "fixed" else [arg.get(k) if isinstance(arg, dict) else None
                                            for k in need]
    if kind != "fixed" and (not isinstance(arg, dict) or set(arg) != set(need)):
        raise TraceError(f"{kind}: expected the keys {', '.join(need)}, got {arg!r}")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v) \
                or v < 0 or (kind == "lognormal" and v is values[0] and v == 0):
            raise TraceError(f"{kind}: expected numbers >= 0 (a median > 0), got {arg!r}")
    return GapDist(kind, *(float(v) for v in values))  # type: ignore[arg-type]


@dataclass(frozen=True)
class Fanout:
    probability: float = 0.0  # a main turn's chance of spawning sub-agents
    children: int = 2  # sub-agents spawned together
    turns: int = 2  # each sub-agent's turns


@dataclass(frozen=True)
class Shape:
    """A generated session's shape (the module docstring)."""

    turns: LengthDist  # main turns per session
    system_prompt: int  # tokens ahead of every root's first input
    input: LengthDist  # a turn's new input
    output: LengthDist
    tool_gap: GapDist
    user_gap: GapDist
    tool_share: float = 0.8
    fanout: Fanout = Fanout()


def generate_sessions(sessions: int, shape: Shape, *, rate: float = 1.0,
                      arrival: str = "poisson", burstiness: float = 1.0, block_size: int = 16,
                      arrival_seed: int = 0, length_seed: int = 0) -> pd.DataFrame:
    """A session frame (harness/traces/sessions.py) of `sessions` generated sessions, hash
    ids chained in blocks of `block_size`, the system prompt's full blocks shared by all."""
    new_input, output, tool_gap, fanout = shape.input, shape.output, shape.tool_gap, shape.fanout
    starts = _arrivals(sessions, float(rate), arrival, float(burstiness), arrival_seed, None)
    rng = np.random.default_rng(length_seed)
    # Column by column, a turn a row: the draws interleave (one generator, in turn order),
    # so they are made one at a time, in the order of a turn's fields.
    columns = {k: array("d" if k.endswith("_s") else "b" if k == "gap_kind" else "q")
               for k in KEYS}
    prompt, parent_of = array("q"), array("q")
    code = {k: GAP_CATEGORIES.index(k) for k in GAP_KINDS}
    base = 0  # the session's root's row; its turn k is row base + k

    def add(sid, k, parent, start, gap, kind, new):
        j = base + parent if parent >= 0 else -1
        out = int(output.sample(1, rng)[0])
        for key, v in zip(KEYS, (sid, k, parent, float(start), gap, code[kind], int(new), out)):
            columns[key].append(v)
        prompt.append(int(new) + (prompt[j] + columns["max_new_tokens"][j] if j >= 0 else 0))
        parent_of.append(j)

    for sid, start in enumerate(starts):
        base = len(prompt)
        n = int(shape.turns.sample(1, rng)[0])
        add(sid, 0, -1, start, 0.0, "user", shape.system_prompt + new_input.sample(1, rng)[0])
        main, k = 0, 1
        for _ in range(1, n):
            if rng.random() < fanout.probability:
                spawn = tool_gap.sample(rng)  # the sub-agents start together
                for _ in range(fanout.children):
                    parent, kind, gap = main, "subagent", spawn
                    for _ in range(fanout.turns):
                        add(sid, k, parent, start, gap, kind, new_input.sample(1, rng)[0])
                        parent, kind, k = k, "tool", k + 1
                        gap = tool_gap.sample(rng)
            kind = "tool" if rng.random() < shape.tool_share else "user"
            add(sid, k, main, start, (tool_gap if kind == "tool" else shape.user_gap).sample(rng),
                kind, new_input.sample(1, rng)[0])
            main, k = k, k + 1
    shared = list(range(shape.system_prompt // block_size))
    frame = {k: np.frombuffer(v, np.int8 if k == "gap_kind" else np.float64 if k.endswith("_s")
                              else np.int64) for k, v in columns.items()}
    return tree_frame(frame, np.frombuffer(prompt, np.int64), np.frombuffer(parent_of, np.int64),
                      block_size, shared)
