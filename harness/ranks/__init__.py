"""A run over engine processes, one per device: the processes started and ended
(processes.py), the messages between them and the harness (messages.py), each one's body
(rank_main.py: a co-located DP rank, rank_process.py, or a P/D instance's rank,
pd_rank_process.py, with p2p_waits.py), the loop that feeds them (loop.py, with replay.py
and pd_replay.py) and what they record (recorder.py; a P/D request's two rows joined,
pd_join.py)."""
