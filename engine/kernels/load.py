"""A profile's kernel table for a stack, read once a process (a sweep builds many engines
on a few profiles) and cut to the families the profile takes from it."""

from __future__ import annotations

from functools import lru_cache
from typing import Tuple

from ..devices.profile import DeviceProfile
from .table import KernelTable, read


@lru_cache(maxsize=None)
def _table(path: str, families: Tuple[str, ...]) -> KernelTable:
    whole = read(path)
    if not families:
        return whole
    return KernelTable(whole.profile, whole.stack, whole.source, whole.notice,
                       [r for r in whole.rows if r.family in families])


def kernel_table(profile: DeviceProfile, stack: str) -> KernelTable:
    kernels = profile.kernels[stack]
    return _table(str(kernels.table), kernels.families)
