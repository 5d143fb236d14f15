"""Everything the repository points to is in the repository: every docs/, workloads/ or
tests/ path a file names exists, and nothing points beside the repository."""

import os
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NAMED = re.compile(r"\b((?:docs|workloads|tests)/[\w./-]*\w\.(?:md|yaml|csv))\b")
OUTSIDE = re.compile(r"\.\./shared|\bshared/(?:design|traces)\b|\b[A-Z_]{5,}\.md")
SUFFIXES = {".py", ".pyi", ".md", ".yaml", ".toml", ".hpp", ".cpp", ".txt"}


def files():
    for root, dirs, names in os.walk(REPO):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in ("build", "results")]
        yield from (Path(root) / n for n in names)


def text_files():
    for path in files():
        if path.suffix in SUFFIXES:
            yield path.relative_to(REPO), path.read_text(encoding="utf-8")


def test_named_paths_exist():
    missing = [f"{name}: {target}" for name, text in text_files()
               for target in NAMED.findall(text)
               if not (REPO / target).exists() and not (REPO / name.parent / target).exists()]
    assert not missing, missing


def test_nothing_points_beside_the_repository():
    # The root's pages, even where tests run from a copy without them (.ci/sanitize).
    here = {path.name for path in files()} | {"README.md", "CONTRIBUTING.md"}
    found = [f"{name}: {m.group(0)}" for name, text in text_files()
             for m in OUTSIDE.finditer(text) if m.group(0) not in here]
    assert not found, found
