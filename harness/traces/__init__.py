"""Trace input: the readers of every format, streamed and checked (read.py), the writers
(write.py), generated arrivals and lengths (generate.py), the trace a workload names
(of_workload.py) and a trace's prefix-reuse bound (reuse.py)."""
