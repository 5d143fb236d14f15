"""The grain the code keeps: no Python function of engine/ or harness/ over 50 lines, no C++
function of csrc/ over 60 (ruff holds branches, arguments and statements: pyproject.toml).
A declarative block (a schema, a table of columns) is module-level data, not a function."""

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PYTHON_LINES, CPP_LINES = 50, 60


def python_functions():
    for path in sorted([*(REPO / "engine").rglob("*.py"), *(REPO / "harness").rglob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield f"{path.relative_to(REPO)}:{node.lineno} {node.name}", \
                    node.end_lineno - node.lineno + 1


def cpp_functions():
    """Every brace block of csrc/ whose head (the text since the last `;`, `{` or `}`) has a
    parameter list and is not a namespace's or a type's: a function body (or a lambda's),
    and its length in lines from the line that opens it."""
    for path in sorted((REPO / "csrc").rglob("*.[ch]pp")):
        opened, head = [], ""
        for n, line in enumerate(path.read_text().splitlines(), 1):
            for char in re.sub(r'"(\\.|[^"\\])*"|//.*|^\s*#.*', '""', line) + " ":
                if char == "{":
                    opened.append((n, " ".join(head.split())))
                    head = ""
                elif char == "}":
                    start, what = opened.pop()
                    if "(" in what and not re.match(r"(namespace|struct|class|enum)\b", what):
                        yield f"{path.relative_to(REPO)}:{start} {what[-60:]}", n - start + 1
                    head = ""
                elif char == ";":
                    head = ""
                else:
                    head += char


def test_no_python_function_is_over_50_lines():
    assert [f"{where}: {n} lines" for where, n in python_functions() if n > PYTHON_LINES] == []


def test_no_cpp_function_is_over_60_lines():
    assert [f"{where}: {n} lines" for where, n in cpp_functions() if n > CPP_LINES] == []
