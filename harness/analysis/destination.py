"""Where a command writes a folder whole and replaces it (`gate --update`'s baseline,
`report -o`'s report): what every such place must not be, whoever's marker it carries. The
folder is new (absent, or empty) or one the command made, which each command tells by its
own marker; this module refuses the rest before any marker is read.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, Optional, Sequence

from ..errors import BadInput

MOST = 6  # names a message lists before "and N more"
# The markers of the folders results live in: a place inside one is that folder's
RUN_MARKER, BASELINE_MARKER, REPORT_MARKER = "manifest.json", "baseline.json", "report.json"
ENCLOSING = ((RUN_MARKER, "run folder"), (BASELINE_MARKER, "baseline"),
             (REPORT_MARKER, "report"))


def check_place(dest: Path, sources: Iterable[Path], *, role: str, writes: str,
                own: str) -> bool:
    """BadInput naming `dest` unless a folder may be written there: never a symbolic link,
    a folder that is, holds or lies inside one of `sources` (the runs the command reads,
    each named by `role`, "the run folder {}, which the report reads"), a folder inside a
    run folder, a baseline or a report, nor a file; `writes` says what the command writes,
    `own` where it belongs. True when nothing is there to lose (a path that does not exist,
    or an empty folder); False for a folder whose contents the caller must recognise as
    its own."""
    try:
        return _check(Path(dest), sources, role, writes, own)
    except OSError as e:  # a folder it may not read
        raise BadInput(f"{dest}: cannot be inspected ({e.strerror or e})") from None


def _check(dest: Path, sources, role: str, writes: str, own: str) -> bool:
    if dest.is_symlink():
        raise BadInput(f"{dest}: a symbolic link (to {os.readlink(dest)}): {writes} as a "
                       f"folder, not through a link; name the folder itself")
    real = Path(os.path.realpath(dest))
    for source in sources:
        read = Path(os.path.realpath(source))
        where = "is" if real == read else "lies inside" if real.is_relative_to(read) \
            else "holds" if read.is_relative_to(real) else None
        if where:
            raise BadInput(f"{dest}: {where} {role.format(source)}: {own}")
    for parent in real.parents:  # where `report`, `compare` and `gate` would find it
        kind = next((k for marker, k in ENCLOSING if (parent / marker).is_file()), None)
        if kind:
            raise BadInput(f"{dest}: lies inside the {kind} {parent}: {own}")
    existing = next(p for p in (real, *real.parents) if os.path.lexists(p))
    if not existing.is_dir():
        what = "a file" if existing == real else f"inside {existing}, a file"
        raise BadInput(f"{dest}: {what}, not a folder: {writes} as a folder")
    return existing != real or not any(dest.iterdir())


def contents(folder: Path) -> str:
    """'12 run folders, sweeps/ (3 runs) and README.md': what replacing it would delete."""
    if (folder / RUN_MARKER).is_file():
        return f"a run's {RUN_MARKER} (it is a run folder)"
    entries = sorted(folder.iterdir())
    runs = [p for p in entries if is_folder(p) and (p / RUN_MARKER).is_file()]
    parts = [f"{len(runs)} run folder{'s' if len(runs) != 1 else ''}"] if runs else []
    return listed([name(p) for p in entries if p not in runs], parts)


def name(path: Path) -> str:
    """'x (a symbolic link)', 'data/', 'sweeps/ (3 runs)' or 'README.md'."""
    if path.is_symlink():
        return f"{path.name} (a symbolic link)"
    if not path.is_dir():
        return path.name
    inside = sum(1 for _ in path.rglob(RUN_MARKER))
    return f"{path.name}/" + (f" ({inside} run{'s' if inside != 1 else ''})" if inside else "")


def listed(names: Sequence[str], parts: Sequence[str] = (), more: Optional[int] = None) -> str:
    """'a, b and c': `parts`, then the first MOST names, then how many more."""
    more = len(names) - MOST if more is None else more
    shown = [*parts, *names[:MOST], *([f"{more} more"] if more > 0 else [])]
    return shown[0] if len(shown) == 1 else f"{', '.join(shown[:-1])} and {shown[-1]}"


def them(items: Sequence) -> str:
    return "it" if len(items) == 1 else "them"


def is_folder(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink()


def is_file(path: Path) -> bool:
    return path.is_file() and not path.is_symlink()
