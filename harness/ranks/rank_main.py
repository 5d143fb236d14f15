"""The body of every engine process of a run over several devices (harness/ranks/processes.py
starts them): a DP rank of a co-located deployment (rank_process.py) or a rank of a P/D
instance (pd_rank_process.py), each run until its end; a failure is sent to the harness."""

from __future__ import annotations

import os
import signal

from .messages import Failed
from .pd_rank_process import PDRank
from .rank_process import RankSetup, _Rank


def rank_main(rank: int, setup: RankSetup, inbox, outbox) -> None:
    """The process's body; a failure is sent to the harness, then exits 1."""
    # Ctrl-C reaches the terminal's whole process group: the harness stops the ranks
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    harness = os.getppid()
    process = None
    try:
        kind = _Rank if setup.roles[rank] == "colocated" else PDRank
        process = kind(rank, setup, inbox, outbox, harness)
        process.run()
    except BaseException as e:  # noqa: BLE001  (every failure is the harness's to report)
        # reported before the clean-up: a group torn down with work pending may block
        outbox.put(Failed(rank, f"{type(e).__name__}: {e}" if str(e) else type(e).__name__))
        if os.getppid() != harness:  # nobody reads the outbox: exit without flushing it
            outbox.cancel_join_thread()
        raise SystemExit(1) from None
    finally:
        if process is not None:
            process.close()
