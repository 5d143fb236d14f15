"""The tests run on pytest-xdist's workers (pyproject.toml, addopts), except benchmarks:
with --benchmark-enable they run in this one process (pytest-benchmark measures nothing
under xdist). The core is imported first, once: an editable install that rebuilds csrc/ on
import (CONTRIBUTING.md, "Set-up") then builds it before the workers start, not in each of
them at once."""

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    if config.getoption("benchmark_enable", False):
        config.option.numprocesses = 0


def pytest_configure(config):
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        import engine._core  # noqa: F401
