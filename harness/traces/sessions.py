"""Session traces: agentic traffic as ordered trees of turns (docs/workloads.md, "Sessions").

A session's turns are rows, one per line of a JSONL or CSV file, with the columns
    session_id      int    the session
    turn            int    the turn's number in its session, unique there
    parent          int    the turn it follows (-1: the session's root, exactly one)
    arrival_s       float  the root's start, seconds (roots only; a child's is ignored)
    gap_s           float  >= 0: the think or tool time after the parent's last token
                           (children only; a root's is not used)
    gap_kind        str    tool, user or subagent
    input_tokens    int    >= 1: the turn's new input
    max_new_tokens  int    >= 1: its output tokens
    hash_ids        list   optional, every row or none: the prompt's hash blocks
    prompt_tokens   int    optional, every row or none: the prompt's length as recorded
Without prompt_tokens, a turn's prompt is its parent's prompt and output and its own new
input, so prompt_len = parent's prompt_len + parent's max_new_tokens + input_tokens (a
root's: its input), and hash ids, where given, lead with the parent's full prompt blocks;
without them they are chained: a child's leading blocks are its parent's context's, so
that prefix caching sees the reuse. With prompt_tokens, prompt_len = prompt_tokens,
whatever the parent's (a compacted context, output left out of the next prompt, a
sub-agent's own system prompt): the tree then says only when a turn comes, its hash ids
(required) alone what it shares with earlier prompts, and input_tokens is the turn's new
input as the trace states it, for statistics only. A turn's children of kind subagent
start together when it ends; its one other child, the session's next turn, starts once it
and every sub-agent child's subtree have ended, plus its gap.

The frame (`sessions_frame`) is a trace frame (harness/traces/read.py) ordered by session
start, each session's turns in file order, arrival_s each turn's session start (a turn's
own arrival is known only as the replay runs), with the columns above beside it (but
prompt_tokens, which is its prompt_len) and `parent_row`, the parent's row (-1: a root);
its gap_kind is categorical (GAP_CATEGORIES: group it with observed=True).
"""

from __future__ import annotations

import csv
import hashlib
import json
from array import array
from collections.abc import Mapping
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

import numpy as np
import pandas as pd

from fileio.regular import NotAFile, check_regular

from .read import MAX_HASH_ID, TraceError, TraceResult

GAP_KINDS = ("tool", "user", "subagent")
GAP_CATEGORIES = tuple(sorted(GAP_KINDS))  # the frame's gap_kind, listed as strings would be
KEYS = ("session_id", "turn", "parent", "arrival_s", "gap_s", "gap_kind", "input_tokens",
        "max_new_tokens")
OWN = 1 << 62  # chained ids of blocks no other turn's context holds, counted up from here


FIELDS = KEYS + ("hash_ids", "prompt_tokens")
SUBAGENT = GAP_CATEGORIES.index("subagent")


class Turns:
    """Turns as read from `path`, a list a field (FIELDS, None where not given; gap_kind as
    its code in GAP_CATEGORIES), each turn's line beside them for messages."""

    def __init__(self, path) -> None:
        self.path = str(path)
        self.columns: Dict[str, list] = {k: [] for k in FIELDS}
        self.lines = array("q")

    def add(self, line: int, **values) -> None:
        """A turn of these values (FIELDS; gap_kind one of GAP_KINDS) on line `line`."""
        values["gap_kind"] = GAP_CATEGORIES.index(values["gap_kind"])
        for k, column in self.columns.items():
            column.append(values.get(k))
        self.lines.append(line)

    def extend(self, other: Turns) -> None:
        for k, column in self.columns.items():
            column += other.columns[k]
        self.lines += other.lines

    def where(self, i: int) -> str:
        """Turn i's place, FILE:LINE."""
        return f"{self.path}:{self.lines[i]}"

    def __len__(self) -> int:
        return len(self.lines)

    def __getitem__(self, key: str) -> list:
        return self.columns[key]


def looks_like_sessions(path: Path) -> bool:
    """Whether a trace file's first line is a session trace's: a JSON object or a CSV
    header with session_id and parent."""
    with open(path, "rb") as f:
        head = f.read(1 << 16).decode("utf-8-sig", "replace").lstrip()
    first = head.splitlines()[0] if head else ""
    if first.startswith("{"):
        return '"session_id"' in first and '"parent"' in first
    header = {h.strip() for h in first.split(",")}
    return {"session_id", "parent"} <= header


def read_session_trace(path, hash_block_size: Optional[int]) -> TraceResult:
    """read_sessions' frame as a TraceResult (format "sessions", its file's sha256)."""
    turns = _read_turns(Path(path))
    df = sessions_frame(turns, hash_block_size, str(path))
    with open(path, "rb") as f:
        sha256 = hashlib.sha256(f.read()).hexdigest()
    return TraceResult(df, "sessions", Path(path), {}, df.attrs.get("hash_block_size"),
                       None, sha256, Places(turns))


def read_sessions(path, hash_block_size: Optional[int] = None) -> pd.DataFrame:
    """A session trace file (JSONL or CSV) read and checked; TraceError names the file, the
    line and the session of the first problem. Without hash ids in the file and with
    `hash_block_size`, hash ids are chained in blocks of that size."""
    return sessions_frame(_read_turns(Path(path)), hash_block_size, str(path))


class Places(Mapping[Tuple[int, int], str]):
    """Each turn's place (FILE:LINE), by (session, turn): for a message about a frame's row,
    looked up when one is asked for, not held as a string a turn."""

    def __init__(self, turns: Turns) -> None:
        self.path, self.lines = turns.path, np.frombuffer(turns.lines, np.int64).copy()
        self.sessions, self.turns = (np.array(turns[k], np.int64) for k in ("session_id", "turn"))

    def __getitem__(self, key: Tuple[int, int]) -> str:
        at = np.flatnonzero((self.sessions == key[0]) & (self.turns == key[1]))
        if not len(at):
            raise KeyError(key)
        return f"{self.path}:{self.lines[at[0]]}"

    def __iter__(self) -> Iterator[Tuple[int, int]]:
        return zip(self.sessions.tolist(), self.turns.tolist())

    def __len__(self) -> int:
        return len(self.lines)


def _read_turns(path: Path) -> Turns:
    try:
        check_regular(path)
    except NotAFile as e:
        raise TraceError(str(e)) from None
    try:
        with open(path, encoding="utf-8-sig") as f:
            text = f.read()
    except UnicodeDecodeError as e:
        raise TraceError(f"{path}: expected UTF-8 text ({e.reason})") from None
    jsonl = path.suffix.lower() in (".jsonl", ".json") or text.lstrip()[:1] == "{"
    turns = _jsonl(path, text) if jsonl else _csv(path, text)
    if not turns:
        raise TraceError(f"{path}: no turns")
    return turns


def _jsonl(path: Path, text: str) -> Turns:
    turns = Turns(path)
    for line, value in json_objects(path, text):
        _turn(turns, value, line)
    return turns


def json_objects(path: Path, text: str) -> Iterator[Tuple[int, dict]]:
    """(line, object) of each non-blank line of a JSONL text, each a JSON object."""
    for line, row in enumerate(text.splitlines(), 1):
        if not row.strip():
            continue
        try:
            value = json.loads(row)
        except ValueError as e:
            raise TraceError(f"{path}:{line}: not a JSON object ({e})") from None
        if not isinstance(value, dict):
            raise TraceError(f"{path}:{line}: expected a JSON object, got {row[:40]!r}")
        yield line, value


def _csv(path: Path, text: str) -> Turns:
    rows = text.splitlines()
    turns = Turns(path)
    if not rows:
        return turns
    header = [h.strip() for h in next(csv.reader(rows[:1]))]
    for line, fields in enumerate(csv.reader(rows[1:]), 2):
        if not fields or not "".join(fields).strip():
            continue
        if len(fields) != len(header):
            raise TraceError(f"{path}:{line}: {len(fields)} fields, the header has "
                             f"{len(header)}")
        value: Dict[str, object] = {}
        for k, v in zip(header, fields):
            v = v.strip()
            if v == "":
                continue
            try:
                value[k] = v if k == "gap_kind" else json.loads(v)
            except ValueError:
                value[k] = v
        _turn(turns, value, line)
    return turns


def _turn(turns: Turns, value: dict, line: int) -> None:
    """A row's values checked one by one and added to `turns` (the tree is checked in
    sessions_frame)."""
    turn: Dict[str, object] = {}
    sid = value.get("session_id")
    at = f"{turns.path}:{line}: session {sid!r}"
    missing = [k for k in KEYS if k not in value and k not in ("arrival_s", "gap_s")]
    if missing:
        raise TraceError(f"{at}: missing {', '.join(missing)}")
    for k in ("session_id", "turn", "parent", "input_tokens", "max_new_tokens"):
        v, lo = value[k], -1 if k == "parent" else 1 if k.endswith("tokens") else 0
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise TraceError(f"{at}: {k}: expected an integer >= {lo}, got {v!r}")
        turn[k] = v
    root = value["parent"] == -1
    for k in ("gap_s", "arrival_s"):  # a root's gap and a child's arrival are not used
        v = value.get(k, 0.0 if root == (k == "gap_s") else None)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v) \
                or v < 0:
            raise TraceError(f"{at}: {k}: expected a number of seconds >= 0, got {v!r}")
        turn[k] = float(v)
    if value["gap_kind"] not in GAP_KINDS:
        raise TraceError(f"{at}: gap_kind: expected one of {', '.join(GAP_KINDS)}, got "
                         f"{value['gap_kind']!r}")
    turn["gap_kind"] = value["gap_kind"]
    ids = value.get("hash_ids")
    if ids is not None and not (isinstance(ids, list) and all(
            type(h) is int and 0 <= h <= MAX_HASH_ID for h in ids)):
        raise TraceError(f"{at}: hash_ids: expected a list of integers in 0 .. 2**63 - 1")
    turn["hash_ids"] = ids
    n = value.get("prompt_tokens")
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise TraceError(f"{at}: prompt_tokens: expected an integer >= 1, got {n!r}")
    turn["prompt_tokens"] = n
    turns.add(line, **turn)


def sessions_frame(turns: Turns, block: Optional[int], label: str = "sessions",
                   shared_ids: Optional[List[int]] = None) -> pd.DataFrame:
    """The checked frame of these turns (module docstring). `block`: tokens per hash id
    (required where the turns have hash ids; chained ones are made where it is given and
    they have none). `shared_ids`: a root's leading chained ids, shared by every session
    (a common system prompt)."""
    given, recorded = _on_every_turn(turns, "hash_ids"), _on_every_turn(turns, "prompt_tokens")
    if recorded and not given:
        raise TraceError(f"{turns.where(0)}: session {turns['session_id'][0]}: prompt_tokens "
                         f"without "
                         f"hash_ids: a recorded prompt says what it shares by its hash ids")
    if given and block is None:
        raise TraceError(f"{label}: hash_ids present but the hash block size is unknown: "
                         f"pass hash_block_size")
    prompt, parent_of = _tree(turns, recorded)
    columns = {k: np.array(turns[k], np.int8 if k == "gap_kind" else np.float64
                           if k.endswith("_s") else np.int64) for k in KEYS}
    if given:
        ids: Optional[List[list]] = _checked_ids(turns, prompt, parent_of, block, recorded)
        df = _frame(columns, prompt, parent_of, ids, block)
        df.attrs["recorded_prompts"] = recorded
        return df
    return tree_frame(columns, prompt, parent_of, block, shared_ids)


def tree_frame(columns: Dict[str, np.ndarray], prompt: np.ndarray, parent_of: np.ndarray,
               block: Optional[int], shared_ids: Optional[List[int]] = None) -> pd.DataFrame:
    """The frame of turns given as columns (KEYS; gap_kind as codes of GAP_CATEGORIES) whose
    tree holds (sessions_frame's checks passed, or a generated trace's): each turn's prompt
    length and its parent's index (-1: a root) given, hash ids chained where `block` is."""
    ids = _chained_ids(prompt, parent_of, columns["max_new_tokens"], block,
                       shared_ids or []) if block else None
    return _frame(columns, prompt, parent_of, ids, block)


def _on_every_turn(turns: Turns, key: str) -> bool:
    """Whether the turns give `key`: all of them (True) or none (False); some is refused."""
    given = [v is not None for v in turns[key]]
    if any(given) and not all(given):
        i = given.index(False) if given[0] else given.index(True)
        raise TraceError(f"{turns.where(i)}: session {turns['session_id'][i]}: {key} on some "
                         f"turns only: give them on every turn or on none")
    return all(given)


def _tree(turns: Turns, recorded: bool) -> Tuple[np.ndarray, np.ndarray]:
    """Each turn's prompt length (`recorded`: its prompt_tokens) and its parent's index (-1:
    a root), the tree checked."""
    rows: Dict[Tuple[int, int], int] = {}  # (session, turn) -> its index in turns
    prompt = np.zeros(len(turns), np.int64)
    parent_of = np.full(len(turns), -1, np.int64)
    continuation: Dict[int, int] = {}  # a turn's next turn (its one child not a sub-agent)
    roots: set = set()
    sids, numbers, new, output = (turns[k] for k in ("session_id", "turn", "input_tokens",
                                                     "max_new_tokens"))
    for i, (sid, k, p) in enumerate(zip(sids, numbers, turns["parent"])):
        at, key = f"{turns.where(i)}: session {sid}", (sid, k)
        if key in rows:
            raise TraceError(f"{at}: turn {k} given twice (first at {turns.where(rows[key])})")
        if p == k:
            raise TraceError(f"{at}: turn {p} is its own parent: a cycle")
        if p == -1:
            if sid in roots:
                raise TraceError(f"{at}: a second root (parent -1): a session has one")
            roots.add(sid)
            prompt[i] = new[i]
        else:
            j = rows.get((sid, p))
            if j is None:
                later = any(s == sid and u == p for s, u in zip(sids[i:], numbers[i:]))
                raise TraceError(f"{at}: turn {k}'s parent, turn {p}, "
                                 + ("comes later: a parent's line comes before its "
                                    "children's (or the turns form a cycle)" if later
                                    else "is missing"))
            if turns["gap_kind"][i] != SUBAGENT:
                if j in continuation:
                    raise TraceError(f"{at}: turn {p} has two next turns "
                                     f"({numbers[continuation[j]]} and {k}): "
                                     f"only sub-agent children fan out")
                continuation[j] = i
            parent_of[i] = j
            prompt[i] = prompt[j] + output[j] + new[i]
        if recorded:
            prompt[i] = turns["prompt_tokens"][i]
        rows[key] = i
    return prompt, parent_of


def _checked_ids(turns: Turns, prompt, parent_of, block, recorded: bool) -> List[list]:
    """The file's hash ids, each turn's ceil(prompt / block), leading with its parent's full
    prompt blocks unless the prompt is `recorded` (it shares what its ids say)."""
    given = turns["hash_ids"]
    for i, ids in enumerate(given):
        want = -(-int(prompt[i]) // block)
        at = f"{turns.where(i)}: session {turns['session_id'][i]}: turn {turns['turn'][i]}: " \
            "hash_ids"
        if len(ids) != want:
            raise TraceError(f"{at}: {len(ids)} ids, but its {prompt[i]}-token prompt has "
                             f"{want} blocks of {block} tokens")
        j = parent_of[i]
        if j >= 0 and not recorded:
            full = int(prompt[j]) // block
            if ids[:full] != given[j][:full]:
                raise TraceError(f"{at}: its first {full} ids are not its parent's (turn "
                                 f"{turns['turn'][j]}): a turn's prompt begins with its "
                                 f"parent's")
    return given


def _chained_ids(prompt, parent_of, max_new_tokens, block, shared) -> List[list]:
    """Hash ids where the turns have none: a root's own blocks (after `shared`, its full
    ones); a child's, its parent's context's full blocks (the parent's prompt and output,
    the same for all its children), then its own."""
    fresh = iter(range(OWN, OWN + (1 << 61)))
    ids: List[list] = []
    context: Dict[int, list] = {}
    children = np.bincount(parent_of[parent_of >= 0], minlength=len(prompt))
    prompt, parent_of, output = (np.ascontiguousarray(a, np.int64).data  # items are ints
                                 for a in (prompt, parent_of, max_new_tokens))
    for i in range(len(prompt)):
        n, j = -(-prompt[i] // block), parent_of[i]
        if j < 0:
            head = shared[:min(len(shared), prompt[i] // block)]
        else:
            if j not in context:
                full = (prompt[j] + output[j]) // block
                kept = ids[j][:prompt[j] // block]
                context[j] = kept + [next(fresh) for _ in range(full - len(kept))]
            head = context[j][:n]
            children[j] -= 1
            if not children[j]:  # its last child: the context is no one's else
                del context[j]
        ids.append(head + [next(fresh) for _ in range(n - len(head))])
    return ids


def _frame(columns, prompt, parent_of, ids, block) -> pd.DataFrame:
    sid = columns["session_id"]
    sessions, first, session_of = np.unique(sid, return_index=True, return_inverse=True)
    root = parent_of < 0
    root_start = np.empty(len(sessions))
    root_start[session_of[root]] = columns["arrival_s"][root]
    start = root_start[session_of]
    order = np.lexsort((np.arange(len(sid)), first[session_of], start))  # by start, file order
    row_of = np.empty(len(sid), np.int64)
    row_of[order] = np.arange(len(sid))
    parent_row = np.where(parent_of[order] >= 0, row_of[np.maximum(parent_of[order], 0)], -1)
    t0 = start.min()
    df = pd.DataFrame({
        "arrival_s": start[order] - t0, "prompt_len": prompt[order],
        "max_new_tokens": columns["max_new_tokens"][order], "session_id": sid[order],
        "turn": columns["turn"][order], "parent": columns["parent"][order],
        "parent_row": parent_row, "gap_s": columns["gap_s"][order],
        "gap_kind": pd.Categorical.from_codes(columns["gap_kind"][order], GAP_CATEGORIES),
        "input_tokens": columns["input_tokens"][order]})
    if ids is not None:
        df["hash_ids"] = pd.Series([ids[i] for i in order], dtype=object)
        df.attrs["hash_block_size"] = block
    return df


def is_sessions(df: pd.DataFrame) -> bool:
    return "parent_row" in df.columns
