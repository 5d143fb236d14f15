"""A GIL sweep's arms: what each one releases (docs/gil.md). A workload names them by its
`gil`, `gil_aa` and `gil_postprocess` keys; harness/sweeps/gil_protocol.py orders them."""

from __future__ import annotations

from typing import NamedTuple

from ..schema.values import GIL_ARMS


class Arm(NamedTuple):
    schedule_released: bool  # schedule() releases the GIL
    postprocess_released: bool  # postprocess()'s C++ part releases it


ARMS = dict(zip(GIL_ARMS, (Arm(True, False), Arm(False, False),
                          Arm(True, False),  # released_aa: the released arm again, the A/A floor
                          Arm(True, True))))
