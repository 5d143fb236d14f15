"""The CI examples (examples/ci/, docs/ci.md) are valid YAML, and every `steptrace` command
their jobs run parses as the command-line would take it: a registered command, its
subcommand and flags; the paths they name exist."""

import re
import shlex
from pathlib import Path

import pytest
import yaml

from harness.commands.cli import COMMANDS, parser

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples" / "ci"
# A shell variable a job expands to words, as the command line gets them
EXPANDED = {"$since": "--since 0123abcd"}


def scripts(path: Path):
    """Every shell text a job runs: GitHub's steps' `run`, GitLab's `script`s."""
    data = yaml.safe_load(path.read_text())
    if "jobs" in data:  # GitHub Actions
        return [s["run"] for job in data["jobs"].values() for s in job["steps"] if "run" in s]
    out = []
    for job in data.values():
        if isinstance(job, dict) and "script" in job:
            for item in job["script"]:  # an anchor's list, aliased into a script, is nested
                out += item if isinstance(item, list) else [item]
    return out


def invocations(text: str):
    """Each `steptrace ...` command line in a shell text, up to its redirection or pipe."""
    for line in text.replace("\\\n", " ").splitlines():
        found = re.search(r"\bsteptrace\s+(.*)", line)
        if found and not line.lstrip().startswith("#"):
            words = re.split(r"\s(?:[0-9]?>|\|\|?|;|&&)", found.group(1))[0]
            for name, value in EXPANDED.items():
                words = words.replace(name, value)
            yield shlex.split(words)


@pytest.mark.parametrize("name", ["github-actions.yml", "gitlab-ci.yml"])
def test_each_steptrace_command_of_an_example_parses(name):
    used = [argv for text in scripts(EXAMPLES / name) for argv in invocations(text)]
    commands = {(argv[0], argv[1] if argv[0] == "history" else "") for argv in used}
    assert commands >= {("run", ""), ("gate", ""), ("history", "add"), ("history", "detect"),
                        ("report", "")}
    for argv in used:
        assert argv[0] in COMMANDS, argv
        parser(argv[0]).parse_args(argv)  # BadInput on an unknown flag or subcommand


@pytest.mark.parametrize("name", ["github-actions.yml", "gitlab-ci.yml"])
def test_the_paths_an_example_names_exist(name):
    text = (EXAMPLES / name).read_text()
    named = set(re.findall(r"\b(?:workloads|results/baselines|tests)/[\w./-]*\w", text))
    assert {"workloads/ci_gate.yaml", "results/baselines/ci-gate", "tests/bench"} <= named
    assert [p for p in named if not (REPO / p).exists()] == []
