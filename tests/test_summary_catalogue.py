"""Every summary row is declared once (harness/schema/summary.py): what runs write, what the
views select (show's headline, compare's text, the GIL table, the capacity table) and
docs/metrics.md's summary table all agree with the catalogue."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.commands import main
from harness.schema import TABLES, summary
from harness.sweeps.gil_protocol import PRIMARY
from harness.telemetry import device_frame, device_summary
from tests.helpers import MODELED

pytestmark = pytest.mark.core  # runs the engine: the sanitizer stage runs it too

REPO = Path(__file__).resolve().parents[1]
# Every producer at once: SLOs, a prefix cache, the calibration, a frontend thread and the
# host's telemetry (real clock on the CPU); a modeled deployment's step parts.
CPU = """trace: {generate: {requests: 12, rate: 50, prompt: {fixed: 32}, output: {fixed: 3}}}
model: tiny
device: cpu
calibration_requests: 4
telemetry: {interval_s: 0.05}
slo: {ttft: 10, tpot: 10, e2e: 20}
engine: {prefix_caching: true}
"""


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """(metric, stat, unit) of every summary row two runs wrote."""
    root = tmp_path_factory.mktemp("runs")
    rows = set()
    for name, body in (("cpu", CPU), ("modeled", MODELED + "slo: {ttft: 1}\n")):
        path = root / f"{name}.yaml"
        path.write_text(body + f"output: {root}\n")
        assert main(["run", str(path)]) == 0
        (run,) = (root / name).iterdir()
        table = pd.read_parquet(run / "summary.parquet")
        rows |= set(zip(table["metric"], table["stat"], table["unit"]))
    return rows


def test_every_row_a_run_writes_is_declared(written, capsys):
    capsys.readouterr()
    assert summary.uncatalogued(sorted(written)) == []
    assert {m for m, _, _ in written} >= {"goodput", "prefix_cache", "harness", "delivery_delay",
                                          "frontend", "process_cpu", "attention", "mfu"}


def test_every_device_row_is_declared():
    """An accelerator's rows, from a device table of every source and column."""
    from harness.telemetry.columns import VALUE_COLUMNS

    host = {"process_cpu_pct", "host_cpu_pct", "process_rss_bytes", "host_mem_used_bytes"}
    samples = []
    for source, device in (("nvml", 0), ("npu-smi", 1), ("cpu", -1)):
        columns = host if source == "cpu" else set(VALUE_COLUMNS) - host
        for t in (0.0, 1.0):
            samples.append(dict(t_s=t, source=source, device=device,
                                **{c: 1.0 + t if c in columns else None
                                   for c in VALUE_COLUMNS}))
    rows = device_summary(device_frame(samples), 0.0, 2.0, output_tokens=10)
    found = set(zip(rows["metric"], rows["stat"], rows["unit"]))
    assert summary.uncatalogued(sorted(found)) == []
    assert {"gpu0_util", "npu1_aicore", "energy_per_output_token"} <= {m for m, _, _ in found}


def test_the_views_select_declared_rows():
    declared = {(m.name, stat) for m in summary.SUMMARY for stat in m.units}
    assert set(summary.HEADLINE) <= declared
    for rows in summary.COMPARISON_HEADLINE.values():  # compare's and the report's
        assert set(rows) <= declared and {stat for _, stat in rows} <= summary.TEXT_STATS
    assert set(PRIMARY) <= declared  # the GIL table's columns
    assert summary.TEXT_STATS <= {stat for _, stat in declared}
    assert set(summary.CAPACITY_ROWS.values()) <= declared
    assert set(summary.CAPACITY_ROWS) <= set(TABLES["capacity"].names)


def test_docs_metrics_md_holds_the_declaration_rendered():
    text = (REPO / "docs" / "metrics.md").read_text()
    assert summary.markdown() in text, "regenerate docs/metrics.md's summary table"
    sections = {line.lstrip("#").strip() for line in text.splitlines() if line.startswith("#")}
    assert {m.section for m in summary.SUMMARY} <= sections


def test_a_row_the_catalogue_lacks_is_found():
    assert summary.uncatalogued([("ttft", "p99", "ms"), ("gpux_util", "mean", "%"),
                                 ("ttft", "p99", "s"), ("gpu3_util", "p50", "%")]) == \
        [("ttft", "p99", "ms"), ("gpux_util", "mean", "%")]
    assert np.isin(["gpu3_util"], [summary.find("gpu3_util").name.replace("{device}", "gpu3_")])
