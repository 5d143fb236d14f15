"""A point's throughput per kW and per dollar-hour (docs/metrics.md, "Power and cost"):
its output tokens/s per device over its power per device (power.py, in the row) and over
the price of a device-hour the sweep file gives for its device (`prices`; none bundled)."""

from __future__ import annotations

import math
from typing import Any, Dict


def costs(row: Dict[str, Any], prices: Dict[str, float]) -> Dict[str, float]:
    """`output_tokens_per_kw`, `price_per_hour` and `output_tokens_per_dollar_hour` of a
    row; NaN where its power, its price or its throughput is unknown."""
    per_device = _number(row.get("output_tokens_per_device"))
    watts = _number(row.get("power_w"))
    price = float(prices.get(row.get("device") or "", math.nan))
    return dict(output_tokens_per_kw=per_device / (watts / 1000) if watts > 0 else math.nan,
                price_per_hour=price,
                output_tokens_per_dollar_hour=per_device / price if price > 0 else math.nan)


def _number(v) -> float:
    return math.nan if v is None else float(v)
