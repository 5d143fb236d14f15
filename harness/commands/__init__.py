"""The steptrace command line: one module per command, one entry point, one `--set` syntax
(KEY.PATH=VALUE, the value read as YAML) and `--json` on every command.

Exit codes: 0 ok, 1 the run failed, 2 bad input. Only the commands that run the engine (`run`,
`gil`, `capacity`) may import torch: --version, validate, show, trace and replay-scheduler
never do (tests/test_cli.py checks the first four).

A command says how it failed by raising BadInput (exit 2) or RunFailed (exit 1), and main
prints one line for it. Any other exception is a bug in steptrace: one line that says so and
how to report it, exit 1; `--debug` (before or after the command) adds the traceback.
"""

from __future__ import annotations

import signal
import threading

from ..errors import Terminated
from .common import fail  # these two import the standard library's only: cheap

__all__ = ["entry", "main"]
SIGNAL_EXITS = (128 + signal.SIGINT, 128 + signal.SIGTERM)


def entry() -> int:
    """The process's entry point (the console script, `python -m harness.commands`): main,
    then, after a signal stopped the command, later signals ignored while the interpreter
    exits (torch's teardown takes a while), so a second Ctrl-C or SIGTERM changes neither
    the exit status nor what is on the terminal."""
    code = main()
    if code in SIGNAL_EXITS:
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, signal.SIG_IGN)
    return code


def main(argv=None) -> int:
    """`steptrace ARGS`. Ctrl-C or SIGTERM at any point is one line and exit 130 / 143, also
    while the commands' modules are imported (pandas, torch: seconds) and where no run's
    handler is installed to stop it gently (report, compare, gate --update, ...): the
    signal unwinds through every clean-up, so nothing half-written is left."""
    previous = _raise_on_sigterm()
    try:
        from .cli import main as dispatch
        return dispatch(argv)
    except Terminated:
        return fail("steptrace: interrupted by SIGTERM", 143)
    except KeyboardInterrupt:
        return fail("steptrace: interrupted by SIGINT (Ctrl-C)", 130)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _raise_on_sigterm():
    """SIGTERM raises Terminated from here on (only the main thread takes signals); the
    previous handler, or None where nothing changed."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def terminated(signum, frame):
        raise Terminated
    return signal.signal(signal.SIGTERM, terminated)
