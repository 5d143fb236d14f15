"""A GIL sweep's arms: what each one releases (docs/gil.md). A workload names them by its
`gil`, `gil_aa` and `gil_postprocess` keys; harness/sweeps/gil_protocol.py orders them."""

from __future__ import annotations

from typing import NamedTuple


class Arm(NamedTuple):
    schedule_released: bool  # schedule() releases the GIL
    postprocess_released: bool  # postprocess()'s C++ part releases it


ARMS = {"released": Arm(True, False), "held": Arm(False, False),
        "released_aa": Arm(True, False),  # the released arm again: the A/A noise floor
        "postprocess_released": Arm(True, True)}
