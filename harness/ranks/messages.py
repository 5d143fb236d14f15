"""Every message between the harness and its engine processes (processes.py), declared
once. The harness puts the first four in a rank's inbox; a rank puts the rest in the
harness's one outbox, each naming its rank."""

from __future__ import annotations

from typing import Any, Dict, NamedTuple, Optional, Union


class Begin(NamedTuple):
    """The replay's zero: perf_counter() (CLOCK_MONOTONIC, one clock on a host)."""

    start: float


class Add(NamedTuple):
    """A request (keyword arguments of LLMEngine.add_request); on a decode rank, one whose
    KV the prefill rank `source` sends."""

    request_id: int
    kwargs: Dict[str, Any]
    source: Optional[int] = None


class SendKV(NamedTuple):
    """A prefill rank: send the KV of a handed-off sequence to decode rank `dst`."""

    seq_id: int
    dst: int


class End(NamedTuple):
    """No more requests: finish those taken, or (stopped) stop at once."""

    stopped: bool


class Ready(NamedTuple):
    """The rank is up: its model built, its group joined; its KV pool as sized."""

    rank: int
    kv_pool: Optional[dict]


class Chunk(NamedTuple):
    """The rank's step log's columns: (steps, batches, requests)."""

    rank: int
    columns: tuple


class Done(NamedTuple):
    """The rank ended: its inter-token gaps (values, counts), its output tokens by
    request."""

    rank: int
    itl: tuple
    tokens: Dict[int, list]


class Failed(NamedTuple):
    rank: int
    reason: str


class Prefilled(NamedTuple):
    """A prefill rank handed a sequence off at `t` with its first token (None: rejected)
    and its KV's size."""

    rank: int
    seq_id: int
    first_token: Optional[int]
    nbytes: int
    t: float


class Landed(NamedTuple):
    """A decode rank received a sequence's KV between `start` and `end`."""

    rank: int
    seq_id: int
    start: float
    end: float


class Room(NamedTuple):
    """A decode rank's KV blocks to spare, after the `adds` sequences it was added."""

    rank: int
    blocks: int
    adds: int


Inbox = Union[Begin, Add, SendKV, End]  # what the harness sends a rank
Event = Union[Prefilled, Landed, Room]  # what a P/D rank reports for the replay to act on
