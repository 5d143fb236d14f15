"""What every command shares: --set and --json, and how a command says it failed."""

from __future__ import annotations

import json
import math
import sys


class BadInput(Exception):
    """Exit 2: the command line, a file or a value is wrong; nothing ran."""


class RunFailed(Exception):
    """Exit 1: the input was good, the run failed."""


def fail(message: str, code: int) -> int:
    print(message, file=sys.stderr)
    return code


def add_set(parser, example: str) -> None:
    parser.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE",
                        help=f"override a value, read as YAML (null is None), e.g. --set {example}")


def add_json(parser) -> None:
    parser.add_argument("--json", action="store_true",
                        help="print the result as one JSON document instead of text")


def print_json(data) -> None:
    print(json.dumps(_plain(data), indent=1, allow_nan=False))


def _plain(v):
    """JSON's own types: numpy scalars and arrays as Python's, NaN and infinities as null,
    paths as strings."""
    import numpy as np  # here: the entry point imports this module before any command

    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple, np.ndarray)):
        return [_plain(x) for x in v]
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if v is None or isinstance(v, (bool, int, str)):
        return v
    return str(v)
