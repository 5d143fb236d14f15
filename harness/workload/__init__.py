"""Workload input: the YAML file (schema.py, every key), its loading and checks (load.py,
checks.py, notes.py), `--set` (overrides.py) and the GIL arms it names (arms.py)."""

from .load import Workload, WorkloadError, load_workload

__all__ = ["Workload", "WorkloadError", "load_workload"]
