"""One run of a workload end to end (end_to_end.py): its loop (loops.py), its manifest
(manifest.py), the null-engine and kernel calibrations (calibration.py,
kernel_calibration.py), other processes' share of the host (host_share.py), the tokens
table (tokens.py) and the run as a sweep plans it (planned_run.py)."""
