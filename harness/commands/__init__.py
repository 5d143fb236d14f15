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

from .common import BadInput, RunFailed, fail  # the standard library's only: cheap

__all__ = ["BadInput", "RunFailed", "main"]


def main(argv=None) -> int:
    """`steptrace ARGS`. Ctrl-C at any point is one line and exit 130, also while the
    commands' modules are imported (pandas, torch: seconds) and where no run's handler is
    installed to stop it gently (report, compare, gate --update, ...)."""
    try:
        from .cli import main as dispatch
        return dispatch(argv)
    except KeyboardInterrupt:
        return fail("steptrace: interrupted by SIGINT (Ctrl-C)", 130)
