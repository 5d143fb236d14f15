"""The default run spreads tests over pytest-xdist's workers (pyproject.toml), under which
pytest-benchmark measures nothing; with --benchmark-enable the tests run in one process
(tests/conftest.py), so a benchmark command measures as documented."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # starts a pytest of its own

REPO = Path(__file__).resolve().parents[1]


def test_benchmarks_run_in_one_process_and_are_measured():
    # as from a shell: not as a worker of this run's xdist (pytest-benchmark reads these)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "tests/bench/test_cost_model_bench.py", "--benchmark-enable"],
                          capture_output=True, text=True, cwd=REPO, timeout=300, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "bringing up nodes" not in done.stdout
    assert "benchmark:" in done.stdout and "Mean" in done.stdout
