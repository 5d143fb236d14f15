"""JSON as the commands print it and write it beside their results: JSON's own types only
(numpy scalars and arrays as Python's, NaN and infinities as null, paths as text)."""

from __future__ import annotations

import json
import math


def json_text(data) -> str:
    """`data` as --json prints it."""
    return json.dumps(plain(data), indent=1, allow_nan=False)


def plain(v):
    """JSON's own types: numpy scalars and arrays as Python's, NaN and infinities as null,
    paths as strings."""
    import numpy as np  # here: the entry point imports this module before any command

    if isinstance(v, dict):
        return {str(k): plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple, np.ndarray)):
        return [plain(x) for x in v]
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if v is None or isinstance(v, (bool, int, str)):
        return v
    return str(v)
