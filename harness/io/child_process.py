"""How the harness starts its own Python processes (the table writer, the telemetry child):
isolated, with this process's import path less the working directory, and no LD_PRELOAD.

`python -m harness...` would put the working directory first on the child's import path: a
`fcntl.py`, `pyarrow.py` or `harness/` lying where the user runs `steptrace` would run in
the child. Instead the child runs isolated (`-I`: no working directory, no PYTHON*
variables, no user site on its path; site-packages and their .pth hooks, the editable
install's among them, load as usual; `-P` alone would not do, and Python 3.10 lacks it)
and its boot code replaces its import path with this
process's, less '' and the working directory, before it imports anything of ours. So the
child imports the harness package and the libraries this process imported, from where it
imported them.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Dict, List

import harness

HARNESS_ROOT = str(Path(harness.__file__).resolve().parents[1])  # the directory holding harness/

# Runs before any import from the handed path: json, runpy and sys are the interpreter's
# own, found on the isolated path (the standard library and site-packages only).
_BOOT = ("import json, runpy, sys; sys.path[:] = json.loads(sys.argv[1]); "
         "sys.argv[:] = sys.argv[2:]; runpy.run_module(sys.argv[0], run_name='__main__', "
         "alter_sys=True)")


def command(module: str, *args: str) -> List[str]:
    """The argv that runs `module` as `python -m module args` would, isolated."""
    return [sys.executable, "-I", "-c", _BOOT, json.dumps(import_path()), module, *args]


def import_path() -> List[str]:
    """This process's sys.path without '', relative entries and the working directory
    (unless the harness was imported from it); the harness's root first where it is not on
    it (an editable install finds the package through an import hook)."""
    cwd = os.path.realpath(os.getcwd())
    real = {p: os.path.realpath(p) for p in sys.path if os.path.isabs(p)}
    path = [p for p, r in real.items() if r != cwd or r == HARNESS_ROOT]
    return path if HARNESS_ROOT in real.values() else [HARNESS_ROOT, *path]


def environment() -> Dict[str, str]:
    """The child's environment: this process's, less LD_PRELOAD. The children never load
    the C++ core, so a library preloaded for it (the sanitizer build's ASan runtime) is
    not theirs to carry."""
    return {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
