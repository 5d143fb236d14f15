"""Kernel tables: per-op times by shape on a device and software stack (table.py), looked
up by one interpolation rule (lookup.py); docs/modeling.md, "Kernel tables"."""
