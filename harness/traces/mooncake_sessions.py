"""Mooncake's request traces read as sessions (format "mooncake_sessions"; docs/workloads.md,
"Sessions"): the FAST'25 release's conversation and tool-and-agent traces carry no session
id, so the turns are derived from the hash-id chains.

A request's parent is, of the earlier requests without a next turn yet, the one with the
longest list of full-prompt-block ids that leads this request's ids, where
    - this prompt holds the parent's whole context and more: input_length >= the parent's
      input_length + output_length + 1 (steptrace's turn: its prompt is its parent's prompt
      and output plus its own new input);
    - the parent's full blocks are one chain's: the next block is the same in every request
      that goes on past them (they fork nowhere there), and the requests whose full blocks
      end there, then the first that goes on, can follow each other in trace order (each
      prompt holds the one before's prompt and output and more); all of the trace's
      requests count, earlier and later. A prefix several sessions share (a system
      prompt's blocks), or one two continuations fork after, links nothing, even where the
      parent was the first request to hold it.
A request with no such parent is the root of a session of its own, at its timestamp. A
child's gap_s is its arrival minus its parent's: the logging deployment's service of the
parent is in it (the trace does not record it), so the gap is an upper bound on the think
time, and a replay's turn arrives that service time later than the recorded one did.
Every gap_kind is "user" (the trace does not say which requests follow a tool call).
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional

import pandas as pd

from .read import MOONCAKE_BLOCK, TraceError, TraceResult, read_trace
from .sessions import Places, Turns, sessions_frame


def read_mooncake_sessions(path, hash_block_size: Optional[int] = None,
                           time_unit: str = "auto") -> TraceResult:
    """A Mooncake JSONL trace with hash_ids, every line checked as the request reader checks
    it, as a session frame (format "mooncake_sessions")."""
    path = Path(path)
    res = read_trace(path, "mooncake", hash_block_size=hash_block_size, time_unit=time_unit)
    if "hash_ids" not in res.df.columns:
        raise TraceError(f"{path}: mooncake_sessions derives sessions from hash_ids, and no "
                         f"record has them")
    block = res.hash_block_size or MOONCAKE_BLOCK
    turns = _turns(res.df, block, path, _request_lines(path))
    df = sessions_frame(turns, block, str(path))
    return TraceResult(df, "mooncake_sessions", path, {}, block, res.time_unit, res.sha256,
                       Places(turns))


def _request_lines(path: Path) -> List[int]:
    """The line numbers of the requests: the non-blank lines, as the request reader counts
    them."""
    with open(path, encoding="utf-8-sig") as f:
        return [n for n, row in enumerate(f.read().splitlines(), 1) if row.strip()]


def parents(df: pd.DataFrame, block: int) -> List[int]:
    """Each request's parent row (-1: a root), by the rule of the module docstring."""
    prompt, output = df["prompt_len"].tolist(), df["max_new_tokens"].tolist()
    hash_ids = df["hash_ids"].tolist()
    full = [ids[:n // block] for ids, n in zip(hash_ids, prompt)]
    trie = _Node()  # every request's full blocks, before any parent is chosen
    for i, ids in enumerate(full):
        node = trie
        for h in ids:
            node = node.kids.setdefault(h, _Node())
            node.rows.append(i)
        if ids:
            node.ends.append(i)
    parent = [-1] * len(df)
    taken = set()  # rows with a next turn
    for i, ids in enumerate(full):
        node = trie
        for depth, h in enumerate(ids, 1):
            node = node.kids[h]
            for j in reversed(node.ends):
                if j < i and j not in taken and prompt[i] > prompt[j] + output[j] \
                        and node.one_chain(depth, full, prompt, output):
                    parent[i] = j
                    break
        if parent[i] >= 0:
            taken.add(parent[i])
    return parent


class _Node:
    """A full-block prefix: the next blocks after it, the requests holding it (in trace
    order) and those whose full blocks end with it."""

    def __init__(self) -> None:
        self.kids: Dict[int, "_Node"] = {}
        self.rows: List[int] = []
        self.ends: List[int] = []
        self.chain: Optional[bool] = None

    def one_chain(self, depth: int, full, prompt, output) -> bool:
        """Whether this prefix (`depth` blocks) is one chain's (module docstring)."""
        if self.chain is None:
            seq: List[int] = []
            for r in self.rows:
                seq.append(r)
                if len(full[r]) > depth:
                    break
            ends_first = len(seq) - (len(full[seq[-1]]) > depth) == len(self.ends)
            self.chain = len(self.kids) <= 1 and ends_first and all(
                prompt[b] > prompt[a] + output[a] for a, b in zip(seq, seq[1:]))
        return self.chain


def _turns(df: pd.DataFrame, block: int, path: Path, lines: List[int]) -> Turns:
    parent = parents(df, block)
    arrival, prompt = df["arrival_s"].tolist(), df["prompt_len"].tolist()
    output, ids = df["max_new_tokens"].tolist(), df["hash_ids"].tolist()
    session, number = [0] * len(df), [0] * len(df)
    count: List[int] = []  # turns per session so far
    for i, p in enumerate(parent):
        if p < 0:
            session[i] = len(count)
            count.append(0)
        else:
            session[i] = session[p]
        number[i] = count[session[i]]
        count[session[i]] += 1
    turns = Turns(path)
    for i, p in enumerate(parent):
        turns.add(lines[i], session_id=session[i], turn=number[i],
                  parent=number[p] if p >= 0 else -1, arrival_s=arrival[i],
                  gap_s=arrival[i] - arrival[p] if p >= 0 else 0.0, gap_kind="user",
                  max_new_tokens=output[i], hash_ids=ids[i],
                  input_tokens=prompt[i] - (prompt[p] + output[p] if p >= 0 else 0))
    return turns
