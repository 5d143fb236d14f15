"""WEKA's agentic coding traces (kv-cache-tester's trace_replay_tester format) read as
sessions (format "weka"; docs/workloads.md, "Sessions").

A trace is a JSON object, one coding conversation: `block_size` (tokens per hash id),
`hash_id_scope` (local: ids name blocks within the conversation), and `requests`, in order:
model calls (`type` n or s: `t`, `in` prompt tokens, `out` output tokens, `hash_ids` of the
prompt's full blocks, `input_types`, `think_time`) and sub-agent markers (`type` subagent:
`t` when the sub-agent ended, its own `requests`). A file holds one such object, or one a
line (JSONL). Each conversation is a session, its calls turns, as steptrace's model has them:
    - a call's parent is the call before it in its thread (the conversation's, or a
      sub-agent's); a sub-agent's first call is a `subagent` child of the call before the
      marker, and the call after the markers waits for the sub-agents, as the recording did;
    - gap_s: the call's `think_time` (the client's delay after the previous response; where
      missing, its `t` minus the previous call's end); for the call after sub-agent markers,
      its `t` minus the latest marker's `t`;
    - gap_kind: `user` where `input_types` names text, else `tool`;
    - the prompt is as recorded (prompt_tokens = `in`), whether or not it holds its
      parent's context (a compacted context, output left out of the next prompt, a
      sub-agent's own system prompt); input_tokens, the new input trace stats report, is
      `in` minus the parent's context (its prompt and output), at least 1;
    - hash ids: the call's recorded ids (its full blocks), then a fresh one for a last
      partial block; a local scope's ids are offset by the session's number (ids << 32),
      so no two conversations share a block;
    - every session starts at 0 (the traces carry no start times; `load.mode: sessions`
      replays N at a time); a call with `out` 0 asks for 1 token.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from pathlib import Path
from typing import Dict, Iterator, NoReturn, Optional, Tuple

from fileio.regular import NotAFile, check_regular

from .read import MAX_HASH_BLOCK, TraceError, TraceResult
from .sessions import OWN, Places, Turns, json_objects, sessions_frame

LOCAL_BITS = 32  # a local id's bits; the session's number goes above them


def looks_like_weka(path: Path) -> bool:
    """Whether a file begins as a WEKA trace: a JSON object naming block_size and requests
    among its first keys."""
    with open(path, "rb") as f:
        head = f.read(4096).decode("utf-8-sig", "replace").lstrip()
    return head.startswith("{") and '"requests"' in head and '"block_size"' in head \
        and '"session_id"' not in head


def read_weka(path, hash_block_size: Optional[int] = None) -> TraceResult:
    """A WEKA trace file as a session frame (format "weka"); TraceError names the file, the
    line and the session of the first problem."""
    path = Path(path)
    try:
        check_regular(path)
    except NotAFile as e:
        raise TraceError(str(e)) from None
    with open(path, "rb") as f:
        data = f.read()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise TraceError(f"{path}: expected UTF-8 text ({e.reason})") from None
    conversations = list(_conversations(path, text))
    if not conversations:
        raise TraceError(f"{path}: no conversations")
    block = _block_size(path, conversations, hash_block_size)
    fresh = itertools.count(OWN)
    turns = Turns(path)
    for sid, (line, conv) in enumerate(conversations):
        turns.extend(_Session(sid, path, line, block, conv, fresh).turns)
    df = sessions_frame(turns, block, str(path))
    return TraceResult(df, "weka", path, {}, block, None, hashlib.sha256(data).hexdigest(),
                       Places(turns))


def _conversations(path: Path, text: str) -> Iterator[Tuple[int, dict]]:
    """(line, object) of each conversation: the whole file's one object, or one a line."""
    try:
        whole = json.loads(text)
    except ValueError:
        whole = None
    if isinstance(whole, dict):
        yield 1, whole
        return
    yield from json_objects(path, text)


def _block_size(path: Path, conversations, given: Optional[int]) -> int:
    """The conversations' one block_size (and the given one, if any, the same)."""
    sizes: Dict[int, int] = {}  # block_size -> the first line giving it
    for sid, (line, conv) in enumerate(conversations):
        v = conv.get("block_size")
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_HASH_BLOCK:
            raise TraceError(f"{path}:{line}: session {sid}: block_size: expected an integer "
                             f"in 1 .. {MAX_HASH_BLOCK}, got {v!r}")
        sizes.setdefault(v, line)
    if len(sizes) > 1 or (given is not None and given not in sizes):
        raise TraceError(f"{path}: block_size {' and '.join(map(str, sizes))} (lines "
                         f"{', '.join(map(str, sizes.values()))})"
                         + (f", hash_block_size {given}" if given is not None else "")
                         + ": a trace's hash ids have one block size")
    return next(iter(sizes))


class _Session:
    """One conversation's turns (module docstring)."""

    def __init__(self, sid: int, path: Path, line: int, block: int, conv: dict,
                 fresh) -> None:
        self.sid, self.line, self.block, self.fresh = sid, line, block, fresh
        self.where = f"{path}:{line}"
        scope = conv.get("hash_id_scope", "local")
        if scope not in ("local", "global"):
            self.fail("hash_id_scope", f"expected local or global, got {scope!r}")
        self.offset = sid << LOCAL_BITS if scope == "local" else 0
        self.turns = Turns(path)
        self.thread(_list(self, conv, "requests"), None, "requests")

    def fail(self, key: str, why: str) -> NoReturn:
        raise TraceError(f"{self.where}: session {self.sid}: {key}: {why}")

    def thread(self, entries: list, parent: Optional[int], key: str) -> None:
        """A thread's calls, in order, the first one following turn `parent` (None: the
        session's root; else the first is a sub-agent's)."""
        prev, prev_call, prev_at, joined = parent, None, "", None
        for k, e in enumerate(entries):
            at = f"{key}[{k}]"
            if not isinstance(e, dict):
                self.fail(at, f"expected a JSON object, got {e!r:.40}")
            if e.get("type") == "subagent":
                if prev is None:
                    self.fail(at, "a sub-agent before any call of its thread: it follows one")
                self.thread(_list(self, e, "requests", at), prev, f"{at}.requests")
                end = _number(self, e, "t", at)
                joined = end if joined is None else max(joined, end)
            else:
                gap = self.gap(e, at, prev_call, prev_at, joined)
                prev = self.turn(e, at, prev, gap, "subagent" if prev_call is None and
                                 parent is not None else None)
                prev_call, prev_at, joined = e, at, None

    def gap(self, e: dict, at: str, prev_call: Optional[dict], prev_at: str,
            joined) -> float:
        if joined is not None:
            return max(0.0, _number(self, e, "t", at) - joined)
        if "think_time" in e:
            return _number(self, e, "think_time", at)
        if prev_call is None:
            return 0.0
        end = _number(self, prev_call, "t", prev_at) + (
            0.0 if prev_call.get("api_time") is None
            else _number(self, prev_call, "api_time", prev_at))
        return max(0.0, _number(self, e, "t", at) - end)

    def turn(self, e: dict, at: str, parent: Optional[int], gap: float,
             kind: Optional[str]) -> int:
        recorded, out = _count(self, e, "in", at, 1), max(1, _count(self, e, "out", at, 0))
        ids = e.get("hash_ids")
        if not isinstance(ids, list) or not all(
                type(h) is int and 0 <= h < 1 << LOCAL_BITS for h in ids):
            self.fail(f"{at}.hash_ids", f"expected a list of integers in 0 .. 2**{LOCAL_BITS}"
                                        f" - 1")
        context = self.turns["prompt_tokens"][parent] + self.turns["max_new_tokens"][parent] \
            if parent is not None else 0
        n = -(-recorded // self.block)
        blocks = [self.offset + h for h in ids[:n]]
        types = e.get("input_types") or []
        self.turns.add(self.line, session_id=self.sid, turn=len(self.turns),
                       parent=-1 if parent is None else parent, arrival_s=0.0, gap_s=gap,
                       gap_kind=kind or ("user" if "text" in types else "tool"),
                       input_tokens=max(1, recorded - context), max_new_tokens=out,
                       prompt_tokens=recorded,
                       hash_ids=blocks + [next(self.fresh) for _ in range(n - len(blocks))])
        return len(self.turns) - 1


def _list(s: _Session, e: dict, key: str, at: str = "") -> list:
    v = e.get(key)
    if not isinstance(v, list) or not v:
        s.fail(f"{at}.{key}" if at else key, f"expected a non-empty list, got {v!r:.40}")
    return v


def _number(s: _Session, e: dict, key: str, at: str) -> float:
    v = e.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < float("inf"):
        s.fail(f"{at}.{key}", f"expected a number of seconds >= 0, got {v!r}")
    return float(v)


def _count(s: _Session, e: dict, key: str, at: str, lo: int) -> int:
    v = e.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        s.fail(f"{at}.{key}", f"expected an integer >= {lo}, got {v!r}")
    return v
