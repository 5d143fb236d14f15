"""The example outputs README.md and the docs show, made by the commands they show.

    python -m tests.readme_examples --write [NAME ...]   # run them, rewrite their blocks
    python -m tests.readme_examples [NAME ...]           # run them, check the blocks

An example's block follows a line `<!-- example: NAME -->` on its page (README.md's
quickstart; the others on the docs page they belong to). Each runs in a fresh working
directory (so its paths read `results/...`), from the repository's files.
The check holds every line of a block to the command's output, exactly where the output is
the model's (a modeled run's figures, a plan's counts), and in its shape where the host
times it (its numbers masked: a timing, a CPU share, a busy host's note, a run's time
stamp); tests/test_readme_examples.py runs it (slow tier, as CI does). The GIL comparison
(twenty runs, minutes) and the history's `detect` (a hundred real-clock runs, whose noise
decides how many change points there are, each line naming the host) are dated
measurements, not examples: they are not regenerated.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import List, Sequence, Tuple

REPO = Path(__file__).resolve().parents[1]
MARKER = re.compile(r"<!-- example: ([\w-]+) -->")
NUMBER = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?%?")
STAMP = re.compile(r"\d{8}-\d{6}")  # a run folder's time stamp
NOTE = re.compile(r"\s*note: ")
# The host's CPU over the run: none where the run ends before the sampler's first interval
# (a virtual-clock run of a fraction of a second against a sampler process's start-up)
HOST_CPU = re.compile(r"\s*(process_cpu|host_cpu) ")


@dataclass(frozen=True)
class Example:
    name: str
    page: str  # the file that shows it, relative to the repository
    commands: Tuple[Tuple[str, ...], ...]  # the last one's output is the block
    host_timed: str  # a regex: lines whose numbers the host times, checked in shape only


def _steptrace(*args: str) -> Tuple[str, ...]:
    return (sys.executable, "-m", "harness.commands", *args)


EXAMPLES = {e.name: e for e in (
    Example("quickstart", "README.md",
            (_steptrace("run", str(REPO / "workloads" / "quickstart.yaml")),), r"."),
    Example("sessions", "README.md",
            (_steptrace("run", str(REPO / "workloads" / "sessions_weka_h200.yaml")),),
            r"sched_call|sched_cpp|step p|process_cpu|host_cpu|note: busy host"),
    Example("pd", "docs/disaggregation.md",
            (_steptrace("run", str(REPO / "workloads" / "pd_azure_code_h800.yaml")),),
            r"process_cpu|host_cpu|note: busy host"),
    Example("replay-scheduler", "docs/scheduling.md", (_steptrace("replay-scheduler", str(
        REPO / "workloads" / "traces" / "synthetic_small.csv")),),
            r"schedule\(\) p|faster per schedule"),
    Example("sweep", "docs/sweeps.md", (_steptrace(
        "sweep", str(REPO / "workloads" / "sweeps" / "batch_mtp.yaml"), "--workers", "2"),),
            r"$^"),
    Example("gate", "docs/comparing.md", (
        _steptrace("run", str(REPO / "workloads" / "ci_gate.yaml"),
                   "--set", "engine.max_num_batched_tokens=1024"),
        ("GATE",)), r"$^"),
)}


def run(example: Example) -> List[str]:
    """The example's output lines, its commands run in a fresh working directory."""
    env = dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="120")
    with tempfile.TemporaryDirectory() as cwd:
        out = ""
        for command in example.commands:
            if command == ("GATE",):  # the run just made, against the repository's baseline
                run_dir = next(Path(cwd, "results").glob("*/*"))
                command = _steptrace("gate", str(run_dir.relative_to(cwd)), "--baseline",
                                     str(REPO / "results" / "baselines" / "ci-gate"))
            done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                                  timeout=600)
            if done.returncode > 1 or not done.stdout:  # 1: a gate's regression, the point
                raise RuntimeError(f"{' '.join(command)}: exit {done.returncode}: "
                                   f"{done.stderr.strip()[-500:]}")
            out = done.stdout
    return out.replace(str(REPO) + "/", "").rstrip("\n").splitlines()


def blocks(text: str) -> dict:
    """NAME -> (first line, end line) of each marked block's contents."""
    lines = text.splitlines()
    found = {}
    for i, line in enumerate(lines):
        m = MARKER.fullmatch(line)
        if m:
            start = i + 2  # past the fence
            end = lines.index("```", start)
            found[m.group(1)] = (start, end)
    return found


def shape(line: str, host_timed: str) -> str:
    """The line as the check compares it: its time stamp, and where the host timed it its
    numbers and their columns' padding, masked."""
    line = STAMP.sub("STAMP", line)
    return " ".join(NUMBER.sub("#", line).split()) if re.search(host_timed, line) else line


def differences(example: Example, shown: Sequence[str], made: Sequence[str]) -> List[str]:
    """What differs between the page's block and the command's output, line by line; a
    note the host's state decides (a busy host, an engine that fell behind) is left out, and
    so are the host CPU's lines, which the host's speed decides whether a run has."""
    shown, made = ([line for line in lines if not (NOTE.match(line) or HOST_CPU.match(line))]
                   for lines in (shown, made))
    out = []
    for i in range(max(len(shown), len(made))):
        a = shown[i] if i < len(shown) else "(no line)"
        b = made[i] if i < len(made) else "(no line)"
        if shape(a, example.host_timed) != shape(b, example.host_timed):
            out.append(f"line {i + 1}: shown {a!r}, the command {b!r}")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.readme_examples")
    p.add_argument("names", nargs="*", help=f"examples (default: all): {', '.join(EXAMPLES)}")
    p.add_argument("--write", action="store_true", help="rewrite the pages' blocks")
    args = p.parse_args(argv)
    texts = {}  # page -> its text, as rewritten so far
    failed = 0
    for name in args.names or list(EXAMPLES):
        example = EXAMPLES[name]
        text = texts.setdefault(example.page, (REPO / example.page).read_text())
        made = run(example)
        start, end = blocks(text)[name]
        lines = text.splitlines()
        if args.write:
            texts[example.page] = "\n".join(lines[:start] + made + lines[end:]) + "\n"
            continue
        diff = differences(example, lines[start:end], made)
        if diff:
            failed += 1
            print(f"{example.page}: example {name!r} differs from its command's output "
                  f"(python -m tests.readme_examples --write {name}):", *diff[:5], sep="\n  ")
    if args.write:
        for page, text in texts.items():
            (REPO / page).write_text(text)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
