"""The scheduler's Python arguments, checked by name (the reference scheduler's side of
csrc/bindings/py_args.hpp, which checks the C++ bindings' arguments in the same words).

An integer refuses bool and anything without __index__, and values beyond int64; a number
refuses bool, text and NaN/inf; a flag refuses anything but a bool (Python's or numpy's); an
integer sequence refuses floats and bools, in an array (its dtype) or element by element.
Each refusal is a ValueError naming the argument and the value, so that both implementations
refuse alike (tests/test_differential.py).
"""

from __future__ import annotations

import math
import operator

import numpy as np

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def shown(value) -> str:
    """repr(value), cut to 100 characters."""
    r = repr(value)
    return r if len(r) <= 100 else r[:97] + "..."


def is_sequence(value) -> bool:
    """A sequence of items to check one by one: not text, not a mapping."""
    return (hasattr(type(value), "__getitem__")
            and not isinstance(value, (dict, str, bytes, bytearray)))


def integer(name: str, value, minimum: int = INT64_MIN) -> int:
    if type(value) is int:
        i = value
    elif isinstance(value, (bool, np.bool_)) or not hasattr(type(value), "__index__"):
        raise ValueError(f"{name} must be an integer, got {shown(value)}")
    else:
        i = operator.index(value)
    if not INT64_MIN <= i <= INT64_MAX:
        raise ValueError(f"{name} must be a 64-bit integer, got {i}")
    if i < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {i}")
    return i


def finite(name: str, value) -> float:
    kind = type(value)
    if isinstance(value, (bool, np.bool_)) or not (hasattr(kind, "__float__")
                                                   or hasattr(kind, "__index__")):
        raise ValueError(f"{name} must be a number, got {shown(value)}")
    try:
        x = float(value)
    except OverflowError:  # an integer beyond a double: as infinite
        x = math.inf
    if not math.isfinite(x):
        raise ValueError(f"{name} must be finite, got {shown(value)}")
    return x


def boolean(name: str, value) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be a bool, got {shown(value)}")
    return bool(value)


def integers(name: str, value) -> np.ndarray:
    """The integers of `value` (an integer array, or a sequence whose items are integers or
    nested lists, tuples and arrays), flattened, as int64."""
    out: list = []
    _append(name, value, out, top=True)
    return np.array(out, dtype=np.int64)


def _append(name: str, value, out: list, top: bool) -> None:
    if isinstance(value, np.ndarray):
        if value.size == 0:
            return
        if value.dtype.kind not in "iu":
            raise ValueError(f"{name} must hold integers, got an array of {value.dtype}")
        flat = value.reshape(-1)
        if value.dtype.kind == "u" and value.dtype.itemsize == 8:
            over = np.flatnonzero(flat > INT64_MAX)
            if len(over):
                i = int(over[0])
                raise ValueError(f"{name}[{i}] must be a 64-bit integer, got {int(flat[i])}")
        out.extend(flat.astype(np.int64).tolist())
        return
    if top and not is_sequence(value):
        raise ValueError(f"{name} must be None or a sequence of integers, got {shown(value)}")
    for i, x in enumerate(value):
        if type(x) is int and INT64_MIN <= x <= INT64_MAX:
            out.append(x)
        elif isinstance(x, (list, tuple, np.ndarray)):
            _append(f"{name}[{i}]", x, out, top=False)
        else:
            out.append(integer(f"{name}[{i}]", x))
