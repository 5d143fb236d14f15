"""The steptrace command line: one module per command, one entry point, one `--set` syntax
(KEY.PATH=VALUE, the value read as YAML) and `--json` on every command.

Exit codes: 0 ok, 1 the run failed, 2 bad input; Ctrl-C or SIGTERM at any point is one
line and exit 130 / 143 (entry). Only the commands that run the engine (`run`,
`gil`, `capacity`) may import torch: --version, validate, show, trace and replay-scheduler
never do (tests/test_cli.py checks the first four).

A command says how it failed by raising BadInput (exit 2) or RunFailed (exit 1), and main
prints one line for it. Any other exception is a bug in steptrace: one line that says so and
how to report it, exit 1; `--debug` (before or after the command) adds the traceback.
"""

from __future__ import annotations

import signal
import sys
import threading

from ..errors import Terminated
from .common import interrupted  # these two import the standard library's only: cheap

__all__ = ["entry", "main"]


def entry() -> int:
    """The process's entry point (the console script, `python -m harness.commands`): main,
    holding to the process's end: once the command has its exit status (its result
    printed, or a signal's line), SIGINT and SIGTERM are ignored while the interpreter
    exits (its teardown, torch's and pandas', takes a while), so a Ctrl-C or SIGTERM then
    changes neither the exit status nor what is on the terminal. Python's own SIGINT
    handler, which the interpreter restores as it ends, would kill it with the signal
    (status -2) and a traceback; an ignored signal outlives that."""
    return main(hold=True)


def main(argv=None, hold: bool = False) -> int:
    """`steptrace ARGS`. Ctrl-C or SIGTERM at any point is one line and exit 130 / 143, also
    while the commands' modules are imported (pandas, torch: seconds) and where no run's
    handler is installed to stop it gently (report, compare, gate --update, ...): the
    signal unwinds through every clean-up, so nothing half-written is left. `hold` (the
    process's entry): from the exit status on, both signals ignored (entry())."""
    previous = _raise_on_sigterm()
    try:
        from .cli import main as dispatch
        code = dispatch(argv)
        _ignore_signals(hold)
        return code
    except Terminated:
        _ignore_signals(hold)
        return _interrupted(argv, "SIGTERM", 143)
    except KeyboardInterrupt:
        _ignore_signals(hold)
        return _interrupted(argv, "SIGINT (Ctrl-C)", 130)
    finally:
        if previous is not None and not hold:
            signal.signal(signal.SIGTERM, previous)


def _ignore_signals(hold: bool) -> None:
    """With `hold`, SIGINT and SIGTERM ignored from here to the process's end (the main
    thread's; only it takes signals)."""
    if hold and threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, signal.SIG_IGN)


def _interrupted(argv, name: str, code: int) -> int:
    return interrupted(f"interrupted by {name}", code,
                       "--json" in (sys.argv[1:] if argv is None else argv))


def _raise_on_sigterm():
    """SIGTERM raises Terminated from here on (only the main thread takes signals); the
    previous handler, or None where nothing changed."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def terminated(signum, frame):
        raise Terminated
    return signal.signal(signal.SIGTERM, terminated)
