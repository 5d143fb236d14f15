"""Driving a replay: the step loop on the real or the virtual clock (driver.py), one run of
a workload end to end (run.py, manifest.py), the serving frontend's thread (frontend.py), the
null-engine calibration, other processes' share of the host, and a bare scheduler stepped
as an engine (sched_replay.py)."""
