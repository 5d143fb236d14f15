"""Device telemetry: one sampler process per run, the `device` table, its summary.

    sampler = Sampler(backend, device_indices, interval_s, t0, pid)
    sampler.start()
    ...                                   # the run
    frame, notes = sampler.stop()         # DEVICE_COLUMNS rows; notes for manifest.json
    device_summary(frame, window_start_s, window_end_s, output_tokens)

Columns, sources and what each utilisation figure means: docs/telemetry.md.
"""

import importlib

# The sampler's child process imports this package to reach its sources; the names
# below load on first use so that the child never pays for pandas (~0.8 s, ~60 MB).
_EXPORTS = {"DEVICE_COLUMNS": "columns", "Sampler": "sampler", "device_frame": "sampler",
            "device_summary": "summary"}

__all__ = list(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
