"""The parser and the dispatch behind `steptrace` (harness/commands/__init__.py): every
command's failure said in one line and an exit status."""

from __future__ import annotations

import argparse
import glob
import importlib
import os
import sys
import traceback
import warnings
from pathlib import Path
from typing import Optional

from ..errors import BadInput, RunFailed
from .common import fail, print_json, printable_output

# Every command: its module (imported only when it is the one run, so that `steptrace
# --help` and `--version` import no command's dependencies) and its one line of help.
COMMANDS = {
    "run": ("run", "replay a workload into the engine, write its tables"),
    "gil": ("gil", "run a workload's GIL A/B protocol (gil: both, interleaved blocks; "
                   "docs/gil.md)"),
    "capacity": ("capacity", "find the highest arrival rate that meets the workload's SLO, "
                             "on a modeled device"),
    "serve": ("serve", "serve a workload's engine over an OpenAI-compatible HTTP API until "
                       "stopped, recorded as a run"),
    "sweep": ("sweep", "run many points of a workload (axes of keys and values), in "
                       "processes of this host, into one table with its Pareto fronts"),
    "validate": ("validate", "check a workload without running it"),
    "show": ("show", "print a run's summary table"),
    "trace": ("trace", "read, convert and summarise request traces"),
    "replay-scheduler": ("replay_scheduler", "replay a trace's arrivals through the C++ "
                                             "scheduler and the Python reference, side by "
                                             "side"),
    "compare": ("compare", "compare two arms of runs, metric by metric"),
    "gate": ("gate", "judge candidate runs against a baseline (exit 1 on a regression or a "
                     "change)"),
    "history": ("history", "keep runs' figures across commits and find where they changed "
                           "(exit 1 on a regression)"),
    "report": ("report", "write an HTML report, a Markdown summary and figures for one run, "
                         "a sweep or several runs"),
    "calibrate": ("calibrate", "time the engine's own ops on this device over a grid of "
                               "shapes, into a kernel table"),
}
REPORT = ("this is a bug in steptrace: please report it (an issue on the project's tracker) "
          "with the command line, the input files it names if you can share them, and the "
          "output of the same command with --debug")
DEBUG_HELP = "on a failure, show the Python traceback too (for reporting a bug)"


class _Parser(argparse.ArgumentParser):
    """A usage error is bad input, said in one line like every other (argparse's own prints
    the usage too)."""

    def error(self, message: str):
        raise BadInput(f"{self.prog}: {message} (see {self.prog} --help)")


def parser(command: Optional[str] = None) -> argparse.ArgumentParser:
    """Every command listed; `command`'s arguments added (its module imported), where one
    is given."""
    from engine import __version__

    p = _Parser(prog="steptrace", description="Trace-driven benchmarking harness for a "
                "DeepSeek-style LLM inference engine.")
    p.add_argument("--version", action="version", version=f"steptrace {__version__}")
    p.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    sub = p.add_subparsers(dest="command", required=True)
    for name, (_, help) in COMMANDS.items():
        parsed = sub.add_parser(name, help=help)
        if name == command:
            _module(name).add(parsed)
    _add_debug(sub)
    return p


def _module(name: str):
    return importlib.import_module(f".{COMMANDS[name][0]}", __package__)


def _command(argv) -> Optional[str]:
    """The command the arguments name: the first word that is one."""
    return next((a for a in argv if a in COMMANDS), None)


def _add_debug(sub) -> None:
    """--debug after the command too (`steptrace run W.yaml --debug`), nested ones included."""
    for command in set(sub.choices.values()):
        command.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                             help=DEBUG_HELP)
        for action in command._actions:
            if isinstance(action, argparse._SubParsersAction):
                _add_debug(action)


def main(argv=None) -> int:
    """Every command's output shown as text (control characters escaped), numpy's warnings
    about the NaN and infinite values a result folder may hold left unsaid: the commands
    say what is undefined themselves."""
    argv = sys.argv[1:] if argv is None else list(argv)
    with printable_output(), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return _dispatch(argv)


def _dispatch(argv) -> int:
    args = argparse.Namespace(debug="--debug" in argv)
    failed = _Failure("--json" in argv)
    try:
        command = _command(argv)
        if command == "compare":  # `A... -- B...`: the arms split before parsing
            argv = _module(command).split_arms(argv)
        args = parser(command).parse_args(argv)
        return args.handler(args)
    except BrokenPipeError:  # `steptrace show RUN | head`: the reader had enough
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit
        return 0
    except BadInput as e:
        return failed("error", _unexpanded(_one_line(e), argv), 2)
    except RunFailed as e:
        if args.debug and e.__cause__ is not None:
            traceback.print_exception(e.__cause__, file=sys.stderr)
        return failed("run failed", _one_line(e), 1)
    except Exception as e:  # not a failure any command expects: a bug, said as one
        if args.debug:
            traceback.print_exc(file=sys.stderr)
        where = traceback.extract_tb(e.__traceback__)[-1]
        return failed("internal error", f"{type(e).__name__}: {_one_line(e)} (at "
                      f"{Path(where.filename).name}:{where.lineno}); {REPORT}", 1)


class _Failure:
    """A failure's one line on stderr; with --json also a document on stdout, so that a
    script reading stdout gets JSON whatever happened: {"error": KIND, "message": ...,
    "exit_code": N}."""

    def __init__(self, json: bool) -> None:
        self.json = json

    def __call__(self, kind: str, message: str, code: int) -> int:
        if self.json:
            print_json(dict(error=kind, message=message, exit_code=code))
        return fail(f"steptrace: {kind}: {message}", code)


def _unexpanded(message: str, argv) -> str:
    """`message`, with a word on the first argument it names that is a pattern no path
    matches: the shell passes such a pattern on as written (`results/x/*`), where it looks
    like a path that is missing or an argument too many."""
    sets = {i + 1 for i, a in enumerate(argv) if a == "--set"}  # values, not paths
    for i, arg in enumerate(argv):
        if i in sets or arg.startswith("-") or not glob.has_magic(arg) or arg not in message:
            continue
        if not glob.glob(arg) and not os.path.lexists(arg):
            return (f"{message}; {arg} is a pattern the shell did not expand (no path matches "
                    f"it): check the path, and quote a pattern that steptrace is to expand")
    return message


def _one_line(e: BaseException) -> str:
    """A message on one line: a multi-line one (from a library) is joined."""
    return "; ".join(s.strip() for s in str(e).splitlines() if s.strip()) or type(e).__name__
