"""The recorder of a run over rank processes: each rank keeps its own step log
(harness/ranks/rank_process.py) and sends its columns; here one chunk of every rank of an
instance is merged into the instance's rows (by step, then dp_rank) and handed to the one
table writer, as an in-process run's chunks are (harness/record/recorder.py). A co-located
run is one instance of every rank; each instance of a P/D deployment hands its chunks over
as they come, and its requests' rows are joined here (harness/ranks/pd_join.py)."""

from __future__ import annotations

from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..record.recorder import Recorder
from .pd_join import PDJoin


class RanksRecorder(Recorder):
    """A Recorder fed by take() with the ranks' chunks; its own step log stays empty."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._itl: List[tuple] = []
        self._num_done = 0
        n = len(self.warm)
        # a P/D deployment's: the harness fills in its transfers (harness/ranks/pd_replay.py),
        # their times in pd_times
        self.join: Optional[PDJoin] = PDJoin(n, self.pd_times) \
            if self.pd_times is not None else None

    def take(self, ranks, final: bool = False) -> None:
        """Hand over every round of chunks all ranks of an instance have sent (`final`:
        also what only some sent: a failed run's last rows); at the end, the ranks'
        gaps."""
        groups = ranks.groups
        while True:
            ready = [all(ranks.chunks[r] for r in g) or (final and any(ranks.chunks[r] for r in g))
                     for g in groups]
            if not any(ready):
                break
            self._sender.check()
            self._sender.put(([merge([ranks.chunks[r].pop(0) for r in g if ranks.chunks[r]])
                               if go else None for g, go in zip(groups, ready)], 0))
        self._num_done = ranks.num_done
        if final:
            self._itl = [done.itl for _, done in sorted(ranks.done.items())]

    @property
    def num_done(self) -> int:
        return self._num_done

    def itl(self):
        """(gap values, counts) of measured, completed requests, over every rank."""
        parts = self._itl or [self.log.itl()]
        return tuple(np.concatenate(column) for column in zip(*parts))

    def retained_bytes(self) -> Tuple[int, int]:
        requests, steps = super().retained_bytes()
        return requests + (self.join.nbytes if self.join is not None else 0), steps

    def _joined(self, parts: Sequence[Tuple[str, Mapping[str, np.ndarray]]]) \
            -> Sequence[Mapping[str, np.ndarray]]:
        return super()._joined(parts) if self.join is None else self.join.rows(parts)

    def _unjoined(self) -> Sequence[Dict[str, np.ndarray]]:
        return () if self.join is None else self.join.unjoined()


def merge(parts: Sequence[tuple]) -> tuple:
    """One (steps, batches, requests) of the ranks' columns: steps and batches by step,
    then dp_rank, each rank's rows in their order."""
    steps, batches, requests = (_concat([p[i] for p in parts]) for i in range(3))
    for table in (steps, batches):
        order = np.lexsort((table["dp_rank"], table["step"]))  # stable
        for name, column in table.items():
            table[name] = [column[i] for i in order] if isinstance(column, list) \
                else column[order]
    return steps, batches, requests


def _concat(tables: Sequence[Dict]) -> Dict:
    if len(tables) == 1:
        return dict(tables[0])
    return {name: sum((list(t[name]) for t in tables), []) if isinstance(tables[0][name], list)
            else np.concatenate([t[name] for t in tables]) for name in tables[0]}
