"""A workload's sessions (docs/workloads.md, "Sessions"): a session trace file (a format
of harness/traces/session_readers.py, or `auto` telling one) or generator
(`trace.generate.sessions`), and `load.mode: sessions`; replayed in this process, by
either loop, into one co-located engine or a P/D deployment's, its turns enqueued from the
engines' loop or by the frontend's thread, or sent to a `target` endpoint by the client; a
session file's turns checked against the replay: each session's chain of gaps within a
replay's span, each turn within a DP rank's KV pool where the pool is known before
running."""

from __future__ import annotations

from pathlib import Path
from typing import List, Tuple

import numpy as np

from engine.scheduler_config import MAX_SEQ_TOKENS
from fileio.regular import NotAFile, check_regular

from ..traces.read import TraceResult
from ..traces.session_readers import SESSION_FORMATS, session_format
from .schema import MAX_SPAN_S, executor_spec


def replays_sessions(values) -> bool:
    """Whether these (checked) workload values replay a session trace."""
    g = values["trace"]["generate"]
    return values["trace"]["format"] in SESSION_FORMATS or bool(g and g.get("sessions"))


def sessions(values, data, path: Path, fail) -> None:
    """trace.format resolved to sessions where `auto` reads a session file; the sessions
    section null where the generator leaves it out; load.mode: sessions and what a session
    replay cannot take refused by key; frontend.mode inline unless the workload asks for
    the thread."""
    trace, load = values["trace"], values["load"]
    given = (data.get("trace") or {}).get("generate") or {}
    if "sessions" not in given:
        trace["generate"]["sessions"] = None
    elif "requests" in given or (given.get("shared_prefix") or {}).get("groups") is not None:
        fail(("trace", "generate", "requests" if "requests" in given else "shared_prefix"),
             "generated sessions count sessions and chain their own prefixes: expected "
             "trace.generate.sessions alone")
    if trace["file"] and trace["format"] == "auto":
        try:
            trace["format"] = session_format(check_regular(path.parent / trace["file"])) \
                or "auto"
        except (NotAFile, OSError):
            pass  # refused by derived(), as any trace file
    on = trace["format"] in SESSION_FORMATS or "sessions" in given
    if load["mode"] != "sessions" and load["sessions"] is not None:
        fail(("load", "sessions"), f"only load.mode: sessions takes it, and load.mode is "
                                   f"{load['mode']}")
    if load["mode"] == "sessions" and load["sessions"] is None:
        fail(("load", "sessions"), "load.mode: sessions needs the sessions live at a time: "
                                   "expected an integer >= 1")
    if load["mode"] == "sessions" and not on:
        fail(("load", "mode"), "load.mode: sessions replays a session trace: expected "
                               "trace.format: " + ", ".join(SESSION_FORMATS) + " or "
                               "trace.generate.sessions")
    if not on:
        return
    refused = (
        (("load", "mode"), load["mode"] == "concurrency",
         "a session trace's closed loop counts sessions: expected load.mode: sessions"),
        (("trace", "drop_bad_rows"), trace["drop_bad_rows"],
         "a dropped turn would break its session: expected false"),
        (("deployment", "prefill"), bool((data.get("deployment") or {}).get("prefill"))
         and ":" not in values["device"],  # a torch device's: engine processes
         "sessions are replayed into engines in this process: expected a P/D deployment on "
         "a modeled device"))
    for key, bad, why in refused:
        if bad:
            fail(key, why)
    if values["frontend"]["mode"] is None:  # a session replay's turns: the engine's loop's
        values["frontend"]["mode"] = "inline"


def gaps_span(values, read: TraceResult, fail) -> None:
    """Each session's start (scaled; 0 offline or in a closed loop) and its chain of gaps,
    to its last turn's arrival were every turn served at once, within MAX_SPAN_S: a session
    whose gaps reach past it would for all purposes never end."""
    df = _replayed(values, read)
    span, last = _gap_chains(df)
    scale = values["trace"]["time_scale"] if values["load"]["mode"] == "trace" else 0.0
    starts = df["arrival_s"].to_numpy() * scale
    for r in np.flatnonzero(df["parent_row"].to_numpy() < 0):
        if not starts[r] + span[r] <= MAX_SPAN_S:
            end = df.iloc[last[r]]
            fail(("trace", "file"), f"{_place(read, end)}: session {end['session_id']}: its "
                                    f"gaps chain to turn {end['turn']}, {span[r]:.3g} s after "
                                    f"its start at {starts[r]:.3g} s; a replay spans at most "
                                    f"{MAX_SPAN_S:g} s")


def _gap_chains(df) -> Tuple[List[float], List[int]]:
    """Each turn's subtree's span, its arrival to its subtree's last arrival at no service
    time (its sub-agents' subtrees, then its next turn's gap and subtree), and the row of
    that last arrival. A parent's row comes before its children's."""
    parent, gap = df["parent_row"].tolist(), df["gap_s"].tolist()
    agent = (df["gap_kind"] == "subagent").tolist()
    n = len(parent)
    fan, fan_last = [0.0] * n, list(range(n))  # the latest sub-agent subtree's end
    follow, follow_last = [0.0] * n, [-1] * n  # the next turn's gap and subtree
    span, last = [0.0] * n, list(range(n))
    for i in range(n - 1, -1, -1):
        span[i] = fan[i] + follow[i]
        last[i] = follow_last[i] if follow_last[i] >= 0 else fan_last[i]
        p, end = parent[i], gap[i] + span[i]
        if p < 0:
            continue
        if not agent[i]:
            follow[p], follow_last[p] = end, last[i]
        elif end >= fan[p]:
            fan[p], fan_last[p] = end, last[i]
    return span, last


def turns_fit(workload, read: TraceResult, fail) -> None:
    """Every turn's footprint (docs/scheduling.md, choice 1) within what a sequence may hold,
    and within a DP rank's KV pool where the pool is known before running (not `auto` on a
    torch device that sizes it from its memory, nor an endpoint's, nor a P/D deployment's
    pools, each sized its own way and rejecting at run time): else the engine would
    reject the turn, and with it the context its session's later turns build on."""
    values = workload.values
    if values["target"] is not None:
        return
    cfg = workload.engine_config(workload.arms[0]).scheduler
    known = (values["engine"]["num_kv_blocks"] != "auto" or values["device"] == "cpu"
             or executor_spec(values["device"]) is not None) \
        and not (values.get("deployment") or {}).get("prefill")  # P/D: each pool its own
    df = _replayed(values, read)
    prompt, out = df["prompt_len"].to_numpy(np.int64), df["max_new_tokens"].to_numpy(np.int64)
    footprint = prompt if cfg.engine_type == "prompt" else \
        prompt + np.maximum(out, cfg.lookahead)
    blocks = -(-footprint // cfg.block_size)
    bad = np.flatnonzero((footprint > MAX_SEQ_TOKENS) | (known & (blocks > cfg.num_kv_blocks)))
    if not len(bad):
        return
    i = bad[0]
    row = df.iloc[i]
    why = f"a sequence holds at most {MAX_SEQ_TOKENS:,} tokens" \
        if footprint[i] > MAX_SEQ_TOKENS else \
        f"a DP rank's KV pool holds {cfg.num_kv_blocks:,} blocks of {cfg.block_size} tokens " \
        f"({cfg.num_kv_blocks * cfg.block_size:,} tokens), it needs {blocks[i]:,}"
    fail(("trace", "file"), f"{_place(read, row)}: session {row['session_id']}: turn "
                            f"{row['turn']} can never run: its {prompt[i]:,}-token prompt and "
                            f"{out[i]:,} output tokens need {footprint[i]:,} tokens (prompt_len "
                            f"+ max(max_new_tokens, lookahead {cfg.lookahead})); {why}")


def _replayed(values, read: TraceResult):
    """The turns the run replays (up to trace.limit)."""
    return read.df.iloc[:values["trace"]["limit"]]


def _place(read: TraceResult, row) -> str:
    return read.places.get((int(row["session_id"]), int(row["turn"])), str(read.path))
