"""What the report's figures draw, read off the matplotlib figures themselves: no two tick
labels of a figure overlap (their extents as the figure's renderer lays them out), the SLO
limits on the latency CDFs, the ITL percentiles as points, a modeled run's device figure as
the host's CPU; and a single run's page titled by its workload."""

import re
from contextlib import contextmanager

import matplotlib.pyplot as plt
import numpy as np
import pytest

from harness.analysis.report.figures import canvas
from harness.commands import main
from tests.helpers import modeled_runs, with_device_table

pytestmark = pytest.mark.core  # runs the engine: the sanitizer stage runs it too


@contextmanager
def drawn_figures():
    """{figure name: the matplotlib figure} of every figure drawn inside, kept open: `done`
    closes each after its PNG, then names it."""
    figures, closed, real = {}, [], canvas.Drawn

    def named(name, *args, **kw):
        figures[name] = closed.pop()
        return real(name, *args, **kw)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(canvas.plt, "close", closed.append)
        mp.setattr(canvas, "Drawn", named)
        yield figures


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    """{report: (its folder, {figure name: figure})}: one run with an SLO and a device
    table; two devices; a GIL sweep."""
    root = tmp_path_factory.mktemp("figures")
    slo = "slo={ttft: 0.05, tpot: 0.02}"
    released, held = modeled_runs(root / "gil", "gil=both", slo)
    (b200,) = modeled_runs(root / "b200", "device=modeled:B200", slo)
    one = with_device_table(released, root / "onerun")
    out = {}
    for name, runs in (("one", [one]), ("devices", [released, b200]),
                       ("gil_report", [root / "gil"])):
        with drawn_figures() as figures:
            assert main(["report", *map(str, runs), "-o", str(root / name)]) == 0
        out[name] = (root / name, figures)
    yield out
    plt.close("all")


def _tick_labels(fig):
    """Every tick label the figure draws (in its axes' views, visible, with text)."""
    out = []
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            for tick in axis._update_ticks():  # the ticks in view, their labels as drawn
                out += [label for label in (tick.label1, tick.label2)
                        if label.get_visible() and label.get_text()]
    return out


def _texts(fig):
    """Every text the figure draws: tick labels, axis labels, titles, annotations (point
    labels, bar labels, a panel's "nothing to draw"), the figure's own."""
    renderer = fig.canvas.get_renderer()
    out = _tick_labels(fig) + list(fig.texts)
    for ax in fig.axes:
        out += [ax.title, ax._left_title, ax._right_title, ax.xaxis.label, ax.yaxis.label]
        out += [t for t in ax.texts if not hasattr(t, "_check_xy") or t._check_xy(renderer)]
    return [t for t in out if t.get_visible() and t.get_text()]


def clashes(name, fig):
    """(figure, text, text) for each two texts whose extents overlap, (figure, text, "off
    the canvas") for each text reaching past the figure's edge, as the renderer lays
    them out (drawn again at the figure's own dpi: the PNG's placed its axis labels at
    savefig's)."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    texts = _texts(fig)
    boxes = [t.get_window_extent(renderer) for t in texts]
    width, height = fig.bbox.width, fig.bbox.height
    out = [(name, texts[i].get_text(), texts[j].get_text())
           for i in range(len(boxes)) for j in range(i + 1, len(boxes))
           if boxes[i].overlaps(boxes[j])]
    return out + [(name, t.get_text(), "off the canvas") for t, b in zip(texts, boxes)
                  if b.x0 < -1 or b.y0 < -1 or b.x1 > width + 1 or b.y1 > height + 1]


@pytest.mark.slow  # every figure drawn and laid out twice
def test_no_two_texts_of_any_figure_overlap_or_leave_it(reports):
    """Tick labels, axis labels, titles and annotations alike."""
    found = []
    for report, (_, figures) in reports.items():
        assert len(figures) >= 8, (report, sorted(figures))
        for name, fig in figures.items():
            found += [(report, *c) for c in clashes(name, fig)]
    assert not found


@pytest.mark.slow  # every figure drawn and laid out twice
def test_the_pools_and_fronts_figures_texts_fit(tmp_path):
    """Two P/D arms' pools figure (a row per arm's pool, four panels a row, each titled
    with the arm) and a sweep's fronts whose front points crowd (a label each) by the
    same rule."""
    from tests.helpers import pd_runs
    from tests.test_sweep_fronts import row, sweep_folder

    (two,) = pd_runs(tmp_path / "2p1d")
    (one,) = pd_runs(tmp_path / "1p1d", "deployment.prefill.instances=1")
    crowded = [row("modeled:GB200", 100 + i, 10 + 1.5 * i, 900 - 12 * i, 1000)
               for i in range(14)]
    with drawn_figures() as figures:
        assert main(["report", str(two), str(one), "-o", str(tmp_path / "r")]) == 0
        assert main(["report", str(sweep_folder(tmp_path, crowded)), "-o",
                     str(tmp_path / "s")]) == 0
    assert {"pools", "fronts_per_device"} <= set(figures)
    found = [c for name in ("pools", "fronts_per_device", "fronts_per_kw")
             for c in clashes(name, figures[name])]
    plt.close("all")
    assert not found


def test_slo_limits_are_drawn_on_the_latency_cdfs(reports):
    _, figures = reports["one"]
    ttft, tpot = figures["latency_cdf"].axes[:2]
    for ax, limit, label in ((ttft, 50.0, "SLO TTFT 50 ms"), (tpot, 20.0, "SLO TPOT 20 ms")):
        (line,) = [ln for ln in ax.lines if ln.get_label() == label]
        assert list(line.get_xdata()) == [limit, limit]  # vertical, at the limit in ms
        assert label in [t.get_text() for t in ax.get_legend().get_texts()]
    page = (reports["one"][0] / "index.html").read_text()
    assert "The dashed vertical lines are the workload&#39;s SLO limits" in page


def test_a_run_without_an_slo_has_no_slo_line(reports):
    from harness.analysis.report.figures.latency import slo_limits

    class Run:
        def stat(self, metric, stat):
            return float("nan")

    class Arm:
        runs = [Run()]

    assert slo_limits([Arm()], "ttft") == []


def test_the_itl_percentiles_are_points_not_a_line(reports):
    _, figures = reports["devices"]
    lines = figures["itl"].axes[0].lines
    assert lines and all(ln.get_linestyle() == "None" and ln.get_marker() == "o"
                         for ln in lines)


def test_a_modeled_runs_device_figure_is_the_hosts_cpu(reports):
    folder, figures = reports["one"]
    (ax,) = figures["device"].axes  # the CPU alone: the GPU's readings are not the model's
    assert ax.get_title() == "the harness host's CPU (%)"
    assert ax.get_xlabel() == "host wall-clock time (s)"
    page = (folder / "index.html").read_text()
    title = re.search(r'<figure id="fig-device"><h3>(.*?)</h3>', page).group(1)
    assert title == ("The harness host&#39;s CPU: the devices are modeled"
                     '<span class="badge host">host</span>')


def test_a_single_run_is_titled_by_its_workload_the_run_beneath(reports):
    folder, _ = reports["one"]
    page = (folder / "index.html").read_text()
    run = next(p for p in (folder.parent / "onerun").iterdir() if (p / "manifest.json").exists())
    assert "<h1>small</h1>" in page
    assert f'<div class="sub">run {run.name}; modeled</div>' in page
    assert (folder / "summary.md").read_text().startswith(f"# small\n\nrun {run.name}")


class _Wide:
    """A run whose latencies and batch shapes span many decades (an hour's TTFTs from 1 ms
    to minutes, prompts of 1 to 128k tokens): the tick labels' worst case."""

    modeled, disaggregated, name = True, False, "wide"

    def __init__(self, seed):
        rng = np.random.default_rng(seed)
        n = 5000
        self.data = {"ttft_s": 10 ** rng.uniform(-3, 2.3, n), "tpot_s": 10 ** rng.uniform(
            -3.5, 0.5, n), "status": np.array(["finished"] * n),
            "seqlen_q": 2 ** rng.integers(0, 17, n), "seqlen_k": 2 ** rng.integers(0, 17, n)}

    def columns(self, table, names):
        return {n: self.data[n] for n in names}

    def stat(self, metric, stat):
        itl = dict(min=1e-4, p50=0.02, p90=0.05, p95=0.2, p99=3.0, max=120.0)
        return itl[stat] if metric == "itl" else {"ttft": 2.0, "tpot": 0.05}.get(
            stat, float("nan")) if metric == "slo" else float("nan")


@pytest.mark.parametrize("arms", [1, 3])
def test_no_tick_labels_overlap_where_the_data_span_many_decades(arms):
    from harness.analysis.report.arms import PALETTE, Arm
    from harness.analysis.report.figures import latency, shapes

    grouped = [Arm(f"arm {i}", PALETTE[i], [_Wide(i)], {}) for i in range(arms)]
    with drawn_figures() as figures:
        for draw in (latency.ttft_tpot, latency.itl, shapes.heatmap):
            assert draw(grouped) is not None
    overlaps = []
    for name, fig in figures.items():
        renderer = fig.canvas.get_renderer()
        labels = _tick_labels(fig)
        boxes = [label.get_window_extent(renderer) for label in labels]
        overlaps += [(name, labels[i].get_text(), labels[j].get_text())
                     for i in range(len(boxes)) for j in range(i + 1, len(boxes))
                     if boxes[i].overlaps(boxes[j])]
    plt.close("all")
    assert not overlaps


def test_a_gil_sweeps_frontend_figure_has_a_dot_per_run():
    """The frontend's primary metrics per arm (docs/gil.md); none drawn for runs without a
    frontend thread (a modeled sweep's)."""
    from types import SimpleNamespace

    from harness.analysis.report.figures import frontend

    def run(drift, delay, share):
        summary = {("enqueue_drift", "p99"): drift, ("delivery_delay", "p99"): delay,
                   ("frontend", "cpu_share"): share}
        return SimpleNamespace(stat=lambda m, s: summary.get((m, s), float("nan")))

    arms = [SimpleNamespace(label=label, colour=colour,
                            runs=[run(0.01 * k, 0.02 * k, 10.0 + k) for k in range(1, 4)])
            for label, colour in (("gil_mode=released", "#1f6fb2"),
                                  ("gil_mode=held", "#e4572e"))]
    drawn = frontend.draw(arms)
    assert drawn.name == "frontend" and drawn.png.startswith(b"\x89PNG")
    nan = float("nan")
    for arm in arms:
        arm.runs = [run(nan, nan, nan)]
    assert frontend.draw(arms) is None
