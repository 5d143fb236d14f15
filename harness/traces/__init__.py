"""Trace input: the readers of every format, streamed and checked (read.py), the writers
(write.py), generated arrivals and lengths (generate.py) and a trace's prefix-reuse bound
(reuse.py). The trace a workload names is the workload's (harness/workload/trace.py)."""
