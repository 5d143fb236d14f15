"""The recorder of a run against an endpoint (harness/replay/client.py): no engine, so no
step log and no steps or batches tables; each request's row is made from its stream as it
ends and written, a chunk at a time, through the run's table writer, with the columns and
definitions of a local run's requests table where they apply. Those an endpoint cannot
give (the first scheduled step, dp_rank, preemptions, prefix hits, decode stall) hold their
declared missing values (harness/schema/tables.py). A session trace's turns keep their
session_id and turn, and their prompt_len is the prompt as sent (prompted()).

Its token times are the arrivals of the stream's content events: a gap per event after
the first (an event that carries several tokens is one arrival, as vLLM's benchmark counts
them). The gaps are kept to the microsecond as distinct values with counts, as the step
log keeps a local run's.

The endpoint's /metrics scrapes (harness/replay/scrape.py) go to the server table through
the same table writer, a chunk of SERVER_CHUNK rows at a time; the table is written, empty
if need be, with every run.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import pandas as pd

from ..schema.tables import REQUESTS, SERVER
from ..schema.values import COMPLETED, FRONTEND_COLUMNS
from . import metrics
from .prometheus import NAMES, Sample
from .recorder import trace_columns
from .table_writer import Column, TableWriter, coded

CHUNK_REQUESTS = 1024  # rows gathered before they go to the table writer
SERVER_CHUNK = 4096  # server rows gathered before they go to the table writer
UNKNOWN = ("first_scheduled_s", "decode_stall_s", "dp_rank", "preemptions",
           "recomputed_tokens", "prefix_hit_tokens")
GAP_RESOLUTION_S = 1e-6


class ClientRecorder:
    def __init__(self, engine, warmup_steps: int, run_dir, fmt: str = "parquet",
                 labels: Optional[Dict[str, object]] = None, trace: Optional[pd.DataFrame] = None,
                 frontend=None, slo: Optional[Dict[str, float]] = None) -> None:
        """A Recorder's arguments; `engine` and `frontend` are None (there is none) and
        `warmup_steps` 0 (no steps to warm up: workload checks refuse others)."""
        assert trace is not None and engine is None and frontend is None and not warmup_steps
        n = len(trace)
        self._trace = trace_columns(trace)
        self.warm = np.zeros(n, dtype=bool)  # no warm-up: every request is measured
        self._written = np.zeros(n, dtype=bool)
        self.latency = metrics.LatencySummary(n, slo)
        self._tables = TableWriter(run_dir, fmt, ["requests", "server"], labels,
                                   coded(["requests"]))
        self._rows: List[tuple] = []
        self._server: List[Tuple[float, Sample]] = []
        self._server_written = False
        self._gaps: List[Tuple[np.ndarray, np.ndarray]] = []  # (values, counts) by chunk
        self.num_done = 0

    def tables_ready(self) -> None:
        self._tables.ready()

    def arrived(self, request_id: int, t: float) -> None:
        """A closed loop's request arrived (was released) at `t`, not at the trace's time."""
        self._trace["arrival_s"][request_id] = t

    def prompted(self, request_id: int, prompt_len: int) -> None:
        """A session turn's prompt as sent, of its parent's prompt and received output, not
        the trace's length (harness/replay/client_sessions.py)."""
        self._trace["prompt_len"][request_id] = prompt_len

    @property
    def arrival_s(self) -> np.ndarray:
        return self._trace["arrival_s"]

    @property
    def max_new_tokens(self) -> np.ndarray:
        return self._trace["max_new_tokens"]

    def ended(self, request_id: int, sent_s: float, token_times: Sequence[float],
              output_tokens: int, status: str, reason: str) -> None:
        """A request's end: when it was sent, its content events' arrival times, the output
        tokens the endpoint counted (its usage; else the events), how it ended and why."""
        self._rows.append((request_id, sent_s, token_times, output_tokens, status, reason))
        self.num_done += 1
        if len(self._rows) >= CHUNK_REQUESTS:
            self.flush()

    def scraped(self, t: float, samples: Sequence[Sample]) -> None:
        """A scrape of the endpoint's /metrics read at `t`: its samples, server rows."""
        self._server.extend((t, s) for s in samples)
        if len(self._server) >= SERVER_CHUNK:
            self._write_server()

    def flush(self) -> None:
        rows, self._rows = self._rows, []
        if rows:
            self._write(rows)

    def close(self) -> None:
        """The rows left, then the requests never sent (`unfinished`, "never enqueued"), and
        the tables closed whole."""
        try:
            self.flush()
            if self._server or not self._server_written:
                self._write_server()
            never = np.flatnonzero(~self._written)
            if len(never):
                self._write([(int(i), np.nan, (), 0, "unfinished", "never enqueued")
                             for i in never])
        finally:
            self._tables.close()

    def itl(self) -> Tuple[np.ndarray, np.ndarray]:
        """(gap values, counts) of the completed requests."""
        if not self._gaps:
            return np.empty(0), np.empty(0, np.int64)
        values = np.concatenate([v for v, _ in self._gaps])
        counts = np.concatenate([c for _, c in self._gaps])
        distinct, where = np.unique(values, return_inverse=True)
        return distinct, np.bincount(where, weights=counts, minlength=len(distinct)) \
            .astype(np.int64)

    def _write_server(self) -> None:
        rows, self._server = self._server, []
        samples = [s for _, s in rows]
        columns: Dict[str, Column] = dict(
            t_s=np.array([t for t, _ in rows], np.float64),
            metric=[NAMES.get(name, name) for name, _, _ in samples],
            name=[name for name, _, _ in samples], labels=[labels for _, labels, _ in samples],
            value=np.array([v for _, _, v in samples], np.float64))
        self._tables.write(dict(server={c: columns[c] for c in SERVER.names}))
        self._server_written = True

    def _write(self, rows) -> None:
        ids = np.array([r[0] for r in rows], np.int64)
        n = len(ids)
        times = [np.asarray(r[2], np.float64) for r in rows]
        first = np.array([t[0] if len(t) else np.nan for t in times])
        last = np.array([t[-1] if len(t) else np.nan for t in times])
        status = np.array([r[4] for r in rows], dtype=object)
        columns: Dict[str, np.ndarray] = dict(
            request_id=ids, enqueue_s=np.array([r[1] for r in rows], np.float64),
            first_token_s=first, last_token_s=last,
            output_tokens=np.array([r[3] for r in rows], np.int64),
            status=status, reason=np.array([r[5] for r in rows], dtype=object))
        columns.update({name: self._trace[name][ids] for name in self._trace})
        for name in UNKNOWN:
            column = REQUESTS.column(name)
            columns[name] = np.full(n, column.missing, column.type.to_pandas_dtype())
        for c in REQUESTS.columns:
            if c.missing is not None and c.name not in columns:  # the P/D columns
                columns[c.name] = np.full(n, c.missing, c.type.to_pandas_dtype())
        columns.update(metrics.latency_columns(columns))
        columns.update({name: np.full(n, np.nan) for name in FRONTEND_COLUMNS})
        columns = {name: columns[name] for name in REQUESTS.names}
        done = np.isin(status, COMPLETED)
        gaps = [np.diff(t) for t, d in zip(times, done) if d and len(t) > 1]
        if gaps:
            values, counts = np.unique(np.round(np.concatenate(gaps) / GAP_RESOLUTION_S)
                                       * GAP_RESOLUTION_S, return_counts=True)
            self._gaps.append((values, counts))
        self._written[ids] = True
        # no decode stall to summarise: the summary has no row of it
        self.latency.add({k: v for k, v in columns.items() if k != "decode_stall_s"},
                         np.zeros(n, dtype=bool))
        self._tables.write(dict(requests=columns))
