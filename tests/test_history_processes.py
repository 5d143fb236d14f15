"""Two `steptrace history add` processes at once on one store: every run's rows there once,
none torn (docs/comparing.md, "History and change points")."""

import subprocess
import sys

import pytest

from harness.analysis import history_store
from tests.helpers import synthetic_run

pytestmark = pytest.mark.slow


def test_two_concurrent_adds_keep_every_run_once(tmp_path):
    for arm in ("a", "b"):
        for i in range(6):
            synthetic_run(tmp_path / arm / f"{arm}{i}", {"ttft.p99": (0.1 * i, "s")})
    synthetic_run(tmp_path / "shared" / "s0", {"ttft.p99": (1.0, "s")})
    store = tmp_path / "store"
    adds = [subprocess.Popen([sys.executable, "-m", "harness.commands", "history", "add",
                              str(tmp_path / arm), str(tmp_path / "shared"), "--store",
                              str(store), "--commit", "c0", "--date", "2026-12-01"],
                             stderr=subprocess.PIPE, text=True) for arm in ("a", "b")]
    for p in adds:
        assert p.wait(timeout=120) == 0, p.stderr.read()
    rows = history_store.read(store)
    assert sorted(rows["run_id"]) == sorted([f"{arm}{i}" for arm in "ab" for i in range(6)]
                                            + ["s0"])
    assert not [p.name for p in store.iterdir() if p.name.startswith(".")]
