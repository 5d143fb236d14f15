"""One requests-table row per request of a P/D deployment over rank processes, joined from
its two step logs' rows as they come: the prefill instance's (it left handed off, with its
first token) and the decode instance's. The processes send their chunks independently, so
the join keeps the prefill's side of each handed-off request, by request id, until the
decode's row arrives, and holds a decode row that came first. In one process (the modeled
loops) the step logs write the one row themselves (csrc/recorder/step_log.hpp; the
semantics: docs/disaggregation.md, "What is recorded").

Joined: arrival, enqueue and first schedule (and so warm-up, queueing delay, dp_rank and
prefix hits) are the prefill's; the first token is the decode's (when the KV reached it:
what the user sees), the last token, decode stall, output tokens, status and reason the
decode's; preemptions and recomputed tokens the sum of both.
"""

from __future__ import annotations

from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..schema.tables import PD_COLUMNS, REQUESTS
from ..schema.values import AWAITING_DECODE_ROOM, IN_KV_TRANSFER

# the prefill row's values a joined row takes, kept by request id
_KEPT = {"enqueue_s": np.float64, "first_scheduled_s": np.float64,
         "first_scheduled_step": np.int64, "dp_rank": np.int32, "preemptions": np.int32,
         "recomputed_tokens": np.int64, "prefix_hit_tokens": np.int64}
HANDED_OFF, UNFINISHED = (REQUESTS.column("status").code(s) for s in ("handed_off", "unfinished"))
NO_DECODE_RANK = REQUESTS.column("decode_dp_rank").missing


class Transfers:
    """The requests table's P/D columns by request id, as the harness fills them in while
    requests move (harness/ranks/pd_replay.py): each the schema's missing value until
    then. All but decode_dp_rank, which a joined row takes from its decode row's dp_rank.
    A column in `given` (the recorder's hand-off and transfer times) is that array."""

    def __init__(self, n: int, given: Optional[Mapping[str, np.ndarray]] = None) -> None:
        given = given or {}
        self.columns = {c.name: given[c.name] if c.name in given else
                        np.full(n, c.missing, c.type.to_pandas_dtype())
                        for c in PD_COLUMNS if c.name != "decode_dp_rank"}
        self.nbytes = sum(a.nbytes for name, a in self.columns.items() if name not in given)

    def __getitem__(self, name: str) -> np.ndarray:
        return self.columns[name]

    def at(self, ids: np.ndarray) -> Dict[str, np.ndarray]:
        return {name: column[ids] for name, column in self.columns.items()}


class PDJoin:
    def __init__(self, n: int, times: Optional[Mapping[str, np.ndarray]] = None) -> None:
        self.transfers = Transfers(n, times)  # the harness fills it as requests move
        self._kept = {name: np.zeros(n, t) for name, t in _KEPT.items()}
        self._handed = np.zeros(n, bool)
        self._joined = np.zeros(n, bool)
        self._held: List[Mapping[str, np.ndarray]] = []  # decode rows before their prefill's

    @property
    def nbytes(self) -> int:
        """The per-request arrays it owns, in bytes (the decode rows held aside are a
        chunk's)."""
        return self.transfers.nbytes + sum(a.nbytes for a in (*self._kept.values(),
                                                              self._handed, self._joined))

    def rows(self, parts: Sequence[Tuple[str, Mapping[str, np.ndarray]]]) \
            -> List[Dict[str, np.ndarray]]:
        """The requests-table rows of a chunk's step-log rows ((role, rows) per instance,
        prefill instances first; each column an array, `reason` of objects): those that left
        a prefill instance other than handed off, and the joined rows of those that left a
        decode instance."""
        out = []
        for role, rows in parts:
            if role == "prefill":
                handed = np.asarray(rows["status"]) == HANDED_OFF
                ids = np.asarray(rows["request_id"])[handed]
                for name, column in self._kept.items():
                    column[ids] = np.asarray(rows[name])[handed]
                self._handed[ids] = True
                out.append(self._with_transfers(_select(rows, ~handed)))
            else:
                self._held.append(rows)
        held, self._held = self._held, []
        for rows in held:  # a decode row whose prefill row has not come waits for it
            ready = self._handed[np.asarray(rows["request_id"])]
            out.append(self._joined_rows(_select(rows, ready)))
            if not ready.all():
                self._held.append(_select(rows, ~ready))
        return out

    def unjoined(self) -> List[Dict[str, np.ndarray]]:
        """At the run's end: the decode rows whose prefill rows never came (a failed
        prefill process), as they are; then the stranded() rows."""
        held, self._held = self._held, []
        return [{**self._with_transfers(rows), "decode_dp_rank": _rank(rows)} for rows in held] \
            + [self.stranded()]

    def stranded(self) -> Dict[str, np.ndarray]:
        """Rows of the requests handed off that no decode instance took in before the run
        ended: waiting for decode room, or with their KV in transfer. The user saw no
        token of theirs."""
        ids = np.flatnonzero(self._handed & ~self._joined)
        n = len(ids)
        moving = np.isfinite(self.transfers["transfer_start_s"][ids])
        rows = {**{name: column[ids] for name, column in self._kept.items()},
                "request_id": ids.astype(np.int64), "first_token_s": np.full(n, np.nan),
                "last_token_s": np.full(n, np.nan), "decode_stall_s": np.zeros(n),
                "output_tokens": np.zeros(n, np.int64),
                "status": np.full(n, UNFINISHED, np.uint8),
                "reason": np.where(moving, IN_KV_TRANSFER, AWAITING_DECODE_ROOM).astype(object)}
        self._joined[ids] = True
        return self._with_transfers(rows)

    def _joined_rows(self, rows: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
        ids = np.asarray(rows["request_id"])
        kept = {name: column[ids] for name, column in self._kept.items()}
        self._joined[ids] = True
        return {**self._with_transfers(rows), **kept, "decode_dp_rank": _rank(rows),
                "preemptions": kept["preemptions"] + np.asarray(rows["preemptions"]),
                "recomputed_tokens": kept["recomputed_tokens"]
                + np.asarray(rows["recomputed_tokens"])}

    def _with_transfers(self, rows: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
        """The rows with their P/D columns the harness's, decode_dp_rank missing (a decode
        row's is its dp_rank)."""
        ids = np.asarray(rows["request_id"])
        return {**rows, **self.transfers.at(ids),
                "decode_dp_rank": np.full(len(ids), NO_DECODE_RANK, np.int32)}


def _select(rows: Mapping[str, np.ndarray], mask: np.ndarray) -> Dict[str, np.ndarray]:
    return {name: v[mask] for name, v in rows.items()}


def _rank(rows: Mapping[str, np.ndarray]) -> np.ndarray:
    return np.asarray(rows["dp_rank"], np.int32)
