"""What every command shares: --set and --json, one-line failures, text made printable,
a progress line's pace."""

from __future__ import annotations

import re
import sys
import time
from contextlib import contextmanager

from fileio.json_text import json_text

# What a terminal would act on rather than show: C0 controls but tab, newline and carriage
# return (a progress bar's), DEL and C1 controls (ESC and CSI start escape sequences that
# clear screens and retitle windows), and the bidirectional overrides.
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """`text` with every control character written as its escape (ESC as \\x1b)."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


class _Printable:
    """A text stream that writes what it is given through printable(); every other
    attribute is the stream's own (not io.TextIOBase's, whose fileno() raises)."""

    def __init__(self, stream) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(printable(text))
        return len(text)

    def flush(self) -> None:
        self._stream.flush()

    def __getattr__(self, name):  # fileno, isatty, encoding, buffer, ...
        return getattr(self._stream, name)


@contextmanager
def printable_output():
    """stdout and stderr through printable() for the block: run names, profile names,
    errors and file names a results folder holds reach the terminal as text."""
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Printable(sys.stdout), _Printable(sys.stderr)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = streams


def fail(message: str, code: int) -> int:
    print(message, file=sys.stderr)
    return code


def interrupted(message: str, code: int, as_json: bool) -> int:
    """A signal's one line (`steptrace: interrupted by ...`); with --json also the document
    every failure prints on stdout (cli.py `_Failure`), so that a script reading stdout gets
    JSON after a signal too."""
    if as_json:
        print_json(dict(error="interrupted", message=message, exit_code=code))
    return fail(f"steptrace: {message}", code)


def add_set(parser, example: str) -> None:
    parser.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE",
                        help=f"override a value, read as YAML (null is None; a value YAML would "
                             f"read otherwise, as a block `a: b` or with a ` #` comment, is the "
                             f"text as written), e.g. --set {example}")


def add_json(parser) -> None:
    parser.add_argument("--json", action="store_true",
                        help="print the result as one JSON document instead of text")


def print_json(data) -> None:
    print(json_text(data))


def pace(done: int, total: int, start: list, unit: str = "req") -> str:
    """", 4.2 req/s, about 40 s left": the pace since the first report (`start` keeps its
    time and count, or is given them), and the time left at it; "" at the first report."""
    now = time.perf_counter()
    if not start:
        start += [now, done]
        return ""
    rate = (done - start[1]) / (now - start[0]) if now > start[0] else 0.0
    left = f", about {(total - done) / rate:.0f} s left" if rate > 0 and done < total else ""
    return f", {rate:.1f} {unit}/s{left}" if rate >= 1 else f", {rate:.2g} {unit}/s{left}"
