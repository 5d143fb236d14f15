"""`steptrace sweep SWEEP.yaml`: a design-space sweep, many points, each the base workload
with its own overrides, run (or searched for its capacity) in a process of its own, into
one `sweep` table (docs/sweeps.md). Not harness/sweeps/sweep.py, which runs the several
runs one workload plans (the GIL protocol's arms and repeats)."""
