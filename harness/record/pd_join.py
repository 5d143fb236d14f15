"""One requests-table row per request of a P/D deployment, joined from its two step logs'
rows: the prefill instance's (it left handed off, with its first token) and the decode
instance's (it left finished). The join keeps the prefill's side of each handed-off
request, by request id, until the decode's arrives (docs/disaggregation.md, "What is
recorded").

Joined: arrival, enqueue and first schedule (and so warm-up, queueing delay, dp_rank and
prefix hits) are the prefill's; the first token is the decode's (when the KV reached it:
what the user sees), the last token, decode stall, output tokens, status and reason the
decode's; preemptions and recomputed tokens the sum of both.
"""

from __future__ import annotations

from typing import Dict, List, Mapping, Sequence, Tuple

import numpy as np

# the prefill row's values a joined row takes, kept by request id
_KEPT = {"enqueue_s": np.float64, "first_scheduled_s": np.float64,
         "first_scheduled_step": np.int64, "dp_rank": np.int32, "preemptions": np.int32,
         "recomputed_tokens": np.int64, "prefix_hit_tokens": np.int64}
HANDED_OFF, UNFINISHED = 0, 2  # the step log's codes (a prompt engine's `finished`)


class Transfers:
    """What the P/D replay records per request beside the step logs (the requests table's
    P/D columns), by request id."""

    COLUMNS = {"prefill_instance": np.int32, "decode_instance": np.int32,
               "kv_bytes": np.float64, "handoff_s": np.float64, "transfer_start_s": np.float64,
               "transfer_end_s": np.float64, "decode_wait_s": np.float64}

    def __init__(self, n: int) -> None:
        self.columns = {name: np.full(n, -1 if np.dtype(t).kind == "i" else np.nan, t)
                        for name, t in self.COLUMNS.items()}

    def __getitem__(self, name: str) -> np.ndarray:
        return self.columns[name]

    def at(self, ids: np.ndarray) -> Dict[str, np.ndarray]:
        return {name: column[ids] for name, column in self.columns.items()}


class PDJoin:
    def __init__(self, n: int) -> None:
        self.transfers = Transfers(n)  # the replay fills it as requests move
        self._kept = {name: np.zeros(n, t) for name, t in _KEPT.items()}
        self._handed = np.zeros(n, bool)
        self._joined = np.zeros(n, bool)
        # decode rows that came before their prefill rows (P/D instances as processes send
        # their chunks independently); in one process a prefill row always comes first
        self._held: List[Mapping[str, np.ndarray]] = []

    @property
    def nbytes(self) -> int:
        """The per-request arrays, in bytes (the decode rows held aside are a chunk's)."""
        return sum(a.nbytes for a in (*self.transfers.columns.values(), *self._kept.values(),
                                      self._handed, self._joined))

    def rows(self, parts: Sequence[Tuple[str, Mapping[str, np.ndarray]]]) \
            -> List[Dict[str, np.ndarray]]:
        """The requests-table rows of a chunk's step-log rows ((role, rows) per instance,
        prefill instances first; each column an array, `reason` of objects): those that left
        a prefill instance other than handed off, and the joined rows of those that left a
        decode instance."""
        transfers = self.transfers
        out = []
        for role, rows in parts:
            if role == "prefill":
                handed = np.asarray(rows["status"]) == HANDED_OFF
                ids = np.asarray(rows["request_id"])[handed]
                for name, column in self._kept.items():
                    column[ids] = np.asarray(rows[name])[handed]
                self._handed[ids] = True
                out.append(_prefill_only(_select(rows, ~handed), transfers))
            else:
                self._held.append(rows)
        held, self._held = self._held, []
        for rows in held:  # a decode row whose prefill row has not come waits for it
            ready = self._handed[np.asarray(rows["request_id"])]
            out.append(self._joined_rows(_select(rows, ready), transfers))
            if not ready.all():
                self._held.append(_select(rows, ~ready))
        return out

    def unjoined(self) -> List[Dict[str, np.ndarray]]:
        """At the run's end: the decode rows whose prefill rows never came (a failed
        prefill process), as they are; then the stranded() rows."""
        held, self._held = self._held, []
        return [{**rows, **self.transfers.at(np.asarray(rows["request_id"])),
                 "decode_dp_rank": np.asarray(rows["dp_rank"], np.int32)} for rows in held] \
            + [self.stranded()]

    def stranded(self) -> Dict[str, np.ndarray]:
        """Rows of the requests handed off that no decode instance took in before the run
        ended: waiting for decode room, or with their KV in transfer. The user saw no
        token of theirs."""
        transfers = self.transfers
        ids = np.flatnonzero(self._handed & ~self._joined)
        n = len(ids)
        moving = np.isfinite(transfers["transfer_start_s"][ids])
        rows = {**{name: column[ids] for name, column in self._kept.items()},
                "request_id": ids.astype(np.int64), "first_token_s": np.full(n, np.nan),
                "last_token_s": np.full(n, np.nan), "decode_stall_s": np.zeros(n),
                "output_tokens": np.zeros(n, np.int64),
                "status": np.full(n, UNFINISHED, np.uint8),
                "reason": np.where(moving, "in KV transfer", "awaiting decode room")
                .astype(object),
                "decode_dp_rank": np.full(n, -1, np.int32), **transfers.at(ids)}
        self._joined[ids] = True
        return rows

    def _joined_rows(self, rows: Mapping[str, np.ndarray], transfers: Transfers):
        ids = np.asarray(rows["request_id"])
        kept = {name: column[ids] for name, column in self._kept.items()}
        self._joined[ids] = True
        return {**rows, **kept, **transfers.at(ids),
                "decode_dp_rank": np.asarray(rows["dp_rank"], np.int32),
                "preemptions": kept["preemptions"] + np.asarray(rows["preemptions"]),
                "recomputed_tokens": kept["recomputed_tokens"]
                + np.asarray(rows["recomputed_tokens"])}


def _select(rows: Mapping[str, np.ndarray], mask: np.ndarray) -> Dict[str, np.ndarray]:
    return {name: v[mask] for name, v in rows.items()}


def _prefill_only(rows: Dict[str, np.ndarray], transfers: Transfers) -> Dict[str, np.ndarray]:
    """Rows of requests that never left their prefill instance handed off (rejected, or
    unfinished when the run ended)."""
    ids = np.asarray(rows["request_id"])
    return {**rows, **transfers.at(ids), "decode_dp_rank": np.full(len(ids), -1, np.int32)}


def colocated(rows: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """The P/D columns of a co-located instance's rows: one instance did both."""
    rank = np.asarray(rows["dp_rank"], np.int32)
    n = len(rank)
    instance = np.where(rank >= 0, 0, -1).astype(np.int32)
    nan = np.full(n, np.nan)
    return dict(prefill_instance=instance, decode_instance=instance, decode_dp_rank=rank,
                kv_bytes=nan, handoff_s=nan, transfer_start_s=nan, transfer_end_s=nan,
                decode_wait_s=nan)
