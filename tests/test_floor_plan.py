"""docs/architecture.md's floor plan is what the code says now: each generated block is what
tests/floor_plan.py renders from the packages' docstrings and csrc/'s leading comments, so
a module added, moved or re-described fails here until `python -m tests.floor_plan --write`
is run."""

import shutil

import pytest

from tests import floor_plan
from tests.floor_plan import PAGE, PYTHON, REPO, MissingDoc, blocks, docstring, render


def page_blocks():
    return blocks(PAGE.read_text(encoding="utf-8"))


def test_every_block_is_on_the_page_once():
    assert sorted(page_blocks()) == sorted(floor_plan.NAMES)


@pytest.mark.parametrize("name", floor_plan.NAMES)
def test_the_block_is_what_the_code_says(name):
    assert page_blocks()[name] == render(name), \
        f"docs/architecture.md's floor plan of {name} is stale: python -m tests.floor_plan --write"


def test_every_module_has_a_docstring():
    missing = []
    for top in PYTHON:
        for path in sorted((REPO / top).rglob("*.py")):
            try:
                docstring(path, REPO)
            except MissingDoc as e:
                missing.append(str(e))
    assert missing == []


def test_every_package_and_module_has_its_row():
    """A row per package, heading its table, and a row per module in that table."""
    found = page_blocks()
    for top in PYTHON:
        tables = found[top].split("\n\n")
        for path in sorted((REPO / top).rglob("*.py")):
            package = f"| `{path.parent.relative_to(REPO)}/` |"
            table = [t for t in tables if package in t]
            assert len(table) == 1, f"{path}: its package's table"
            assert path.name == "__init__.py" or f"| `{path.name}` |" in table[0], path


def copy_of(tmp_path, name):
    """A copy of the repository's `name` folder under tmp_path, as a root to render."""
    shutil.copytree(REPO / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def test_a_new_module_makes_the_block_stale(tmp_path):
    root = copy_of(tmp_path, "fileio")
    (root / "fileio" / "zipped.py").write_text('"""Archives read as folders."""\n')
    rendered = render("fileio", root)
    assert rendered != page_blocks()["fileio"]
    assert "| `zipped.py` | Archives read as folders |" in rendered


def test_a_changed_docstring_makes_the_block_stale(tmp_path):
    root = copy_of(tmp_path, "fileio")
    path = root / "fileio" / "yaml_lines.py"
    path.write_text(path.read_text().replace('"""YAML loading', '"""YAML parsing', 1))
    assert render("fileio", root) != page_blocks()["fileio"]


def test_a_module_without_a_docstring_is_named(tmp_path):
    root = copy_of(tmp_path, "fileio")
    (root / "fileio" / "bare.py").write_text("X = 1\n")
    with pytest.raises(MissingDoc, match="fileio/bare.py"):
        render("fileio", root)


def test_a_cpp_file_without_a_leading_comment_is_named(tmp_path):
    root = copy_of(tmp_path, "csrc")
    (root / "csrc" / "bare.cpp").write_text("int x;\n")
    with pytest.raises(MissingDoc, match="csrc/bare.cpp"):
        render("csrc", root)


def test_a_row_is_the_first_sentence_cut_at_a_clause():
    assert floor_plan.first_sentence("The loop (e.g. ours). It steps.\n\nMore.") == \
        "The loop (e.g. ours)."
    lead = "The engine's loop over every step of a long run"
    assert floor_plan.cut(lead + ": " + "each step, " * 30 + "and the end.") == lead
    assert floor_plan.cut(lead + ".") == lead
    assert floor_plan.cell("a | b <c> `<d>`") == "a \\| b \\<c> `<d>`"
