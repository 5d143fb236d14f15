"""The `device` table's column names, for the sampler's child, which imports no pyarrow:
one row per sample per source and device. The table is declared in harness/schema the table (types,
units); tests/test_tables_schema.py holds these names to it.

Every value column is null where its source cannot tell; a source never fills one with
a guess. What each source reports: docs/telemetry.md.
"""

SOURCES = ("nvml", "npu-smi", "cpu")
HOST_DEVICE = -1  # the device index of the host rows (source "cpu")

VALUE_COLUMNS = (
    "util_pct", "util_window_s",
    "sm_activity_pct", "tensor_activity_pct", "aicore_pct",
    "mem_busy_pct", "mem_bw_util_pct",
    "mem_used_bytes", "mem_total_bytes",
    "power_w", "energy_j", "sm_clock_mhz", "mem_clock_mhz",
    "process_cpu_pct", "host_cpu_pct", "process_rss_bytes", "host_mem_used_bytes",
)
DEVICE_COLUMNS = ("t_s", "source", "device") + VALUE_COLUMNS


def row(t_s: float, source: str, device: int, **values) -> dict:
    """One sample: the given values, every other value column None."""
    unknown = set(values) - set(VALUE_COLUMNS)
    if unknown:
        raise KeyError(f"not device-table columns: {sorted(unknown)}")
    return {"t_s": t_s, "source": source, "device": device,
            **dict.fromkeys(VALUE_COLUMNS), **values}
