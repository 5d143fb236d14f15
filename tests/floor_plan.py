"""docs/architecture.md's floor plan, rendered from the code: a table per Python package of
fileio/, engine/ and harness/ (the package, then each module, with the first sentence of
its docstring) and one of csrc/ (each file, a header and its source as one, with the first
sentence of its leading comment).

    python -m tests.floor_plan --write   # rewrite the page's blocks
    python -m tests.floor_plan           # exit 1, naming them, where a block is stale

A block stands between `<!-- floor plan: NAME (...) -->` and `<!-- end floor plan -->`;
tests/test_floor_plan.py holds each to what renders now. harness/'s parts come in the
order their imports flow (tests/test_import_rules.py, MAY_IMPORT), those beneath first.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Tuple

from tests.test_import_rules import MAY_IMPORT

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "architecture.md"
PYTHON = ("fileio", "engine", "harness")
NAMES = (*PYTHON, "csrc")
LIMIT = 240  # a cell's characters, past which a sentence is cut at a clause's end
SHORTEST = 40  # a cut never leaves less than this
BLOCK = re.compile(r"<!-- floor plan: (\S+) \(.*?-->\n.*?<!-- end floor plan -->\n", re.S)
CLOSES = {")": "(", "]": "[", "}": "{"}
NAMESPACE = "(a namespace package: no `__init__.py`, so no docstring of its own)"


class MissingDoc(ValueError):
    """A module without a docstring, or a C++ file without a leading comment of its own or
    its header's."""


def harness_order() -> List[str]:
    """harness/'s parts, each after every part it may import, else in MAY_IMPORT's order."""
    placed: List[str] = []
    while len(placed) < len(MAY_IMPORT):
        placed.append(next(part for part, beneath in MAY_IMPORT.items()
                           if part not in placed and beneath <= set(placed)))
    return placed


def scan(text: str) -> Iterable[Tuple[int, str]]:
    """Each character's index, for the characters outside code spans and brackets."""
    opened: List[str] = []
    code = False
    for i, char in enumerate(text):
        if char == "`":
            code = not code
        elif code:
            continue
        elif char in "([{":
            opened.append(char)
        elif char in CLOSES:
            if opened and opened[-1] == CLOSES[char]:
                opened.pop()
        elif not opened:
            yield i, char


def first_sentence(text: str) -> str:
    """The first sentence of the first paragraph, on one line."""
    paragraph = " ".join(text.strip().split("\n\n")[0].split())
    for i, char in scan(paragraph):
        if char in ".!?" and re.match(r" [A-Z`\"'(]", paragraph[i + 1:i + 3]):
            return paragraph[:i + 1]
    return paragraph


def cut(sentence: str) -> str:
    """The sentence, or past LIMIT its lead up to the last `;` (else `:`) before LIMIT that
    ends a clause; without its closing stop."""
    if len(sentence) > LIMIT:
        for mark in ";:":
            ends = [i for i, char in scan(sentence[:LIMIT])
                    if char == mark and i >= SHORTEST and sentence[i + 1:i + 2] == " "]
            if ends:
                sentence = sentence[:ends[-1]]
                break
    return sentence.rstrip(".:;")


def cell(text: str) -> str:
    """Text as a Markdown table cell: pipes escaped, `<` never opening an HTML tag."""
    parts = text.split("`")
    return "`".join(part if n % 2 else part.replace("<", "\\<") for n, part in enumerate(parts)
                    ).replace("|", "\\|")


def docstring(path: Path, root: Path) -> str:
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
    if not doc:
        raise MissingDoc(f"{path.relative_to(root)}: a module without a docstring (its first "
                         "sentence is its row in docs/architecture.md's floor plan)")
    return doc


def packages(top: Path, order: Optional[List[str]] = None) -> List[Path]:
    """The package `top` and every package beneath it (a folder of modules, with or without
    an `__init__.py`), each followed by its own, in `order` (the names of top's
    sub-packages) where given, else alphabetically."""
    subs = sorted(p for p in top.iterdir() if p.is_dir() and any(p.glob("*.py")))
    if order:
        rank = {name: n for n, name in enumerate(order)}
        subs.sort(key=lambda p: rank.get(p.name, len(rank)))
    return [top, *(q for p in subs for q in packages(p))]


def package_table(package: Path, root: Path) -> str:
    init = package / "__init__.py"
    modules = sorted(p for p in package.glob("*.py") if p != init)
    about = docstring(init, root) if init.is_file() else NAMESPACE
    rows = [(f"{package.relative_to(root)}/", about),
            *((p.name, docstring(p, root)) for p in modules)]
    return table("module", "its docstring's first sentence", rows)


def table(what: str, says: str, rows: List[Tuple[str, str]]) -> str:
    lines = [f"| {what} | {says} |", "|---|---|"]
    lines += [f"| `{name}` | {cell(cut(first_sentence(text)))} |" for name, text in rows]
    return "\n".join(lines) + "\n"


def leading_comment(path: Path) -> str:
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("//"):
            break
        lines.append(line[2:].strip())
    return "\n".join(lines)


def cpp_rows(root: Path) -> List[Tuple[str, str]]:
    """A row per file of csrc/, or per header and its source: the header's comment, or the
    file's own."""
    top = root / "csrc"
    units: Dict[Path, List[Path]] = {}
    for path in sorted(top.rglob("*.[ch]pp")):
        units.setdefault(path.with_suffix(""), []).append(path)
    rows = []
    for stem, files in units.items():
        files.sort(key=lambda p: p.suffix != ".hpp")
        comment = next((c for c in map(leading_comment, files) if c), "")
        if not comment:
            raise MissingDoc(f"{files[0].relative_to(root)}: a C++ file without a leading "
                             "comment (nor its header)")
        name = stem.relative_to(top).as_posix()
        suffixes = [p.suffix[1:] for p in files]
        rows.append((f"{name}.{{{','.join(suffixes)}}}" if len(files) > 1
                     else f"{name}.{suffixes[0]}", comment))
    return rows


def render(name: str, root: Path = REPO) -> str:
    """The block NAME, markers included."""
    if name == "csrc":
        edit = "the files' leading comments"
        body = table("file", "its leading comment's first sentence", cpp_rows(root))
    else:
        edit = "the docstrings"
        order = harness_order() if name == "harness" else None
        body = "\n".join(package_table(p, root) for p in packages(root / name, order))
    return (f"<!-- floor plan: {name} (generated by python -m tests.floor_plan --write; edit "
            f"{edit}, not this block) -->\n{body}<!-- end floor plan -->\n")


def blocks(page: str) -> Dict[str, str]:
    """The page's blocks by name; a name twice, or one the floor plan does not render, is
    an error."""
    found: Dict[str, str] = {}
    for m in BLOCK.finditer(page):
        if m.group(1) in found or m.group(1) not in NAMES:
            raise ValueError(f"{PAGE.relative_to(REPO)}: floor plan block {m.group(1)!r} "
                             f"twice or unknown (the blocks: {', '.join(NAMES)})")
        found[m.group(1)] = m.group(0)
    return found


def rewritten(page: str, root: Path = REPO) -> str:
    return BLOCK.sub(lambda m: render(m.group(1), root), page)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.floor_plan", description=__doc__)
    parser.add_argument("--write", action="store_true", help="rewrite the page's blocks")
    args = parser.parse_args(argv)
    page = PAGE.read_text(encoding="utf-8")
    stale = [name for name, block in blocks(page).items() if block != render(name)]
    if args.write:
        PAGE.write_text(rewritten(page), encoding="utf-8")
        print(f"{PAGE.relative_to(REPO)}: rewrote {', '.join(stale) or 'nothing'}")
        return 0
    for name in stale:
        print(f"{PAGE.relative_to(REPO)}: the floor plan of {name} is stale", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
