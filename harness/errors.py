"""How the harness says an operation failed, whatever asked for it (a command, a test, a
library user): BadInput (exit 2), RunFailed (exit 1), Terminated (SIGTERM, unwinding as
Ctrl-C does); the command line turns each into its one line and exit status."""


class BadInput(Exception):
    """Exit 2: the command line, a file or a value is wrong; nothing ran."""


class RunFailed(Exception):
    """Exit 1: the input was good, the run failed."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where no run's handler turns it into a stop (report, compare, ...):
    as Ctrl-C, it unwinds through every clean-up."""
