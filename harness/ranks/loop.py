"""The loop of a run over engine processes, one per device (harness/replay/loop.py's Loop):
a co-located deployment's ranks fed round robin, or a P/D deployment's instances fed by its
routers, each instance over its devices' ranks."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple, Type

import numpy as np

from engine.disaggregation import Disaggregation

from ..record.recorder import Recorder
from ..replay.frontend import Frontend
from .pd_replay import PDFeeder
from .processes import Ranks
from .recorder import RanksRecorder
from .replay import Colocated, Feeder, replay_ranks

CHUNK_STEPS = 1024  # a rank's steps per chunk of columns sent to the harness


class RanksLoop:
    recorder_type: Type[Recorder] = RanksRecorder
    uncalibrated: Optional[str] = "off: the harness's cost over rank processes is not calibrated"
    frontend: Optional[Frontend] = None

    def __init__(self, workload, arm: str) -> None:
        """The engine processes of `workload`'s `arm`, started; its instances (role, index,
        engine) as the recorder and manifest take them: one co-located instance over every
        rank, or a P/D deployment's instances."""
        self.service: Optional[Disaggregation] = workload.disaggregation
        instances = [(pool.role, k, pool.deployment.devices, workload.engine_config(arm, pool))
                     for pool in self.service.pools for k in range(pool.instances)] \
            if self.service is not None else \
            [("colocated", 0, workload.ranks, workload.engine_config(arm))]
        firsts = np.cumsum([0] + [n for _, _, n, _ in instances])
        self.ranks = Ranks([c for _, _, n, c in instances for _ in range(n)],
                           [role for role, _, n, _ in instances for _ in range(n)],
                           [range(a, b) for a, b in zip(firsts[:-1], firsts[1:])],
                           workload, CHUNK_STEPS)
        self.instances: Sequence[Tuple[str, int, Any]] = [
            (role, k, self.ranks.engines[a]) for (role, k, _, _), a in zip(instances, firsts)]

    def manifest(self) -> Dict[str, Any]:
        """Each rank's process and place."""
        return dict(ranks=[dict(rank=r, pid=self.ranks.pids[r], role=role, instance=k,
                                dp_rank=g.index(r))
                           for (role, k, _), g in zip(self.instances, self.ranks.groups)
                           for r in g])

    def run(self, requests, recorder, progress, stop, start) -> bool:
        assert isinstance(recorder, RanksRecorder), "rank processes' chunks"
        feeder: Feeder = Colocated(self.ranks, requests)
        if self.service is not None:
            assert recorder.join is not None, "a P/D deployment's recorder joins"
            feeder = PDFeeder(self.service, self.ranks, requests, recorder.join.transfers)
        return replay_ranks(self.ranks, feeder, requests, recorder, progress, start, stop)

    def output_tokens(self) -> Dict[int, List[int]]:
        """A P/D request's: its prefill's first token, then its decode's."""
        outputs: Dict[int, List[int]] = {}
        for r in sorted(self.ranks.done):
            for i, t in self.ranks.done[r].tokens.items():
                outputs.setdefault(i, []).extend(t)
        return outputs

    def close(self) -> None:
        for _, _, engine in self.instances:
            engine.close()
        self.ranks.close()
