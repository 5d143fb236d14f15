"""Many runs of one workload: the GIL protocol's interleaved order and its table
(gil_protocol.py), every run a workload plans (sweep.py), and the capacity search over the
arrival rate (capacity.py, capacity_search.py)."""
