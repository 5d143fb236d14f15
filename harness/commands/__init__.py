"""The steptrace command line: one module per command, one entry point, one `--set` syntax
(KEY.PATH=VALUE, the value read as YAML) and `--json` on every command.

Exit codes: 0 ok, 1 the run failed, 2 bad input. Only `run` may import torch: --version,
validate, show, trace and replay-scheduler never do (tests/test_cli.py checks the first four).
"""

from __future__ import annotations

import argparse
import os
import sys

from . import replay_scheduler, run, show, trace, validate
from .common import BadInput, RunFailed, fail

COMMANDS = (run, validate, show, trace, replay_scheduler)


def parser() -> argparse.ArgumentParser:
    from engine import __version__

    p = argparse.ArgumentParser(prog="steptrace", description="Trace-driven benchmarking "
                                "harness for a DeepSeek-style LLM inference engine.")
    p.add_argument("--version", action="version", version=f"steptrace {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add(sub)
    return p


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.handler(args)
    except BrokenPipeError:  # `steptrace show RUN | head`: the reader had enough
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit
        return 0
    except BadInput as e:
        return fail(f"steptrace: error: {e}", 2)
    except RunFailed as e:
        return fail(f"steptrace: run failed: {e}", 1)
