"""Nothing runs that the user did not ask for (docs/reliability.md, "Security and the
user's files").

Reports of run folders someone else made: every string a run folder holds reaches
index.html as text, never markup, and summary.md as text GitHub renders as text; a
manifest or a capacity table never makes the report open a file it names; a report that
cannot be written exits 1 and leaves its folder as it was.

The harness's child processes run nothing from the working directory: each planted module
below, imported, leaves a marker file. `python -m` would have put the working directory
first on the children's path, and both children would have run them.
"""

import errno
import importlib
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import textwrap
import time
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import engine
import harness
from harness.commands import main
from harness.io import child_process
from harness.record.table_writer import TableWriter
from harness.telemetry import Sampler
from tests.helpers import MODELED, in_subprocess, modeled_runs, wait_for_samples

pytestmark = pytest.mark.core  # runs the engine: the sanitizer stage runs it too

# --- what a report shows: text, never markup -------------------------------------------

ROOT = Path(__file__).resolve().parents[1]
# the installed packages' files (the sanitizer stage runs a copy of tests/ beside no engine/)
TEMPLATE = Path(harness.__file__).parent / "analysis" / "report" / "templates" / "report.html.j2"
PROFILES = Path(engine.__file__).parent / "devices"

# Markup for a page and for GitHub's Markdown: tags with handlers, an attribute break-out,
# a Markdown image and link, a table cell break, a code span, an entity, math (and
# mathtext matplotlib cannot parse), emphasis, a mention and bare links. No '/': it also
# names files and folders.
COMPONENT = ("<img src=x onerror=alert(1)><svg onload=alert(1)>\"'><b>bold"
             "![i](https:evil.invalid)[l](javascript:alert(1))|`c`&amp;$m$*e*_u_~s~${$"
             "@someone www.evil.invalid")
# Where a string may hold anything: a script, a line break that would start a table row or
# an HTML block, links that fetch.
FULL = (COMPONENT + "<script>alert(1)</script>\n| a | b |\n<a href=https://evil.invalid/p>x</a>"
        " ![j](https://evil.invalid/p.png) https://evil.invalid/q")


# A metric's name holds no '.': compare names a value metric.stat.
METRIC = f"metric{COMPONENT.replace('.', '')}"


def hostile(where: str, text: str = COMPONENT) -> str:
    """The markup, after a tag that says where it was planted."""
    return f"{where}{text}"


def hostile_runs(root: Path) -> dict:
    """Run folders whose every user-controlled string carries markup: the workload's name
    and trace file (both given by --set), a device profile of the user's own (its name and
    every figure's source), and copies of the runs in folders named with markup whose
    manifests hold a workload key and value with markup and whose summaries hold a metric,
    a unit and a busy host's CPU with markup. {"one": a folder of copies of runs a and b
    (arms of two devices and GIL modes), "two": of copies of a and c (a run of another
    trace file)}."""
    import yaml

    root.mkdir(parents=True, exist_ok=True)
    trace = root / f"{hostile('trace')}.csv"
    trace.write_text("arrival_s,prompt_len,max_new_tokens\n"
                     + "".join(f"{i * 0.01:.2f},{4 + 3 * i},{1 + i % 5}\n" for i in range(12)))
    other = root / f"{hostile('other-trace')}.csv"
    other.write_text(trace.read_text().replace("0.00,", "0.001,", 1))
    profile = yaml.safe_load((PROFILES / "h200.yaml").read_text())
    profile["name"] = hostile("profile-name")
    profile["source"] = hostile("profile-source", FULL)
    for key, figure in profile.items():
        for f in (figure.values() if key in ("peak_tflops", "kernels") else [figure]):
            if isinstance(f, dict):
                f["source"] = hostile("figure-source")
    device = root / f"{hostile('profile-file')}.yaml"
    device.write_text(yaml.safe_dump(profile, sort_keys=False))
    workload = root / "w.yaml"
    workload.write_text(MODELED.split("\n", 2)[2] + f"output: {json.dumps(str(root / 'out'))}\n")
    name = hostile("name")

    def run(*sets):
        argv = ["run", str(workload), "--set", f"name={json.dumps(name)}"]
        argv += [a for s in sets for a in ("--set", s)]
        assert main(argv) == 0
        folder = root / "out" / name
        return max((p for p in folder.iterdir() if (p / "manifest.json").is_file()),
                   key=lambda p: p.stat().st_mtime)

    runs = dict(a=run(f"trace={json.dumps(dict(file=str(trace)))}",
                      f"device={json.dumps(f'modeled:{device}')}"),
                b=run(f"trace={json.dumps(dict(file=str(trace)))}", "device=modeled:B200",
                      "gil=held"),
                c=run(f"trace={json.dumps(dict(file=str(other)))}",
                      f"device={json.dumps(f'modeled:{device}')}"))
    for report, arms in (("one", "ab"), ("two", "ac")):
        for arm in arms:
            _tamper(shutil.copytree(runs[arm], root / report / hostile(f"run-folder-{arm}")))
    return dict(one=root / "one", two=root / "two")


def _tamper(copy: Path) -> None:
    """A workload key whose value differs between the copies, a unit, a metric with a unit,
    and a busy host, all with markup; copy b incomplete (named in the page's subtitle)."""
    from harness.record.table_sink import write_table

    arm = copy.name[len("run-folder-")]
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["values"][hostile("key", FULL)] = hostile(f"value-{arm}", FULL)  # a differing key
    manifest["host_cpus"] = 2
    manifest["host_share"] = dict(other_cpu_pct=85.0, steal_pct=0.0, threshold_pct=10.0,
                                  contaminated=True)
    b = arm == "b"
    if b:
        manifest.update(complete=False, ended=manifest["started"])
    (copy / "manifest.json").write_text(json.dumps(manifest))
    summary = pd.read_parquet(copy / "summary.parquet", columns=["metric", "stat", "value",
                                                                  "unit"])
    summary = summary.astype({"metric": str, "stat": str, "unit": str})
    summary.loc[summary["metric"] == "ttft", "unit"] = hostile("unit", FULL)
    extra = [(METRIC, "p50", 1.0 + b, hostile("metric-unit", FULL)),
             ("host_cpu", "mean", 90.0, "%"), ("process_cpu", "mean", 10.0, "%")]
    summary = pd.concat([summary, pd.DataFrame(extra, columns=summary.columns)],
                        ignore_index=True)
    (copy / "summary.parquet").unlink()
    write_table(summary, copy, "summary", "parquet",
                dict(run_id=copy.name, gil_mode=manifest["gil_mode"], overlap=False))


@pytest.fixture(scope="module")
def hostile_reports(tmp_path_factory):
    """Two reports: of the two copies (the GIL and hardware pages, the compare table, a busy
    host, an incomplete run), and of copy a against the run of another trace (arms named
    by the trace file; compare refuses the runs, naming their folders)."""
    root = tmp_path_factory.mktemp("hostile")
    runs = hostile_runs(root / "runs")
    for which in ("one", "two"):  # folders of run folders: a '[' in a path given is a glob
        assert main(["report", str(runs[which]), "-o", str(root / which)]) == 0
    return [root / "one", root / "two"]


class Elements(HTMLParser):
    """Every element of a page, its attributes, and its text as a browser reads it."""

    def __init__(self, page: str) -> None:
        super().__init__(convert_charrefs=True)
        self.elements, self.chunks = [], []
        self.feed(page)
        self.close()
        self.text = "".join(self.chunks)

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.chunks.append(data)


def foreign_elements(page: str) -> list:
    """Elements and attributes the report's template does not write: a tag or an attribute
    name it does not hold, an `on...` handler, an image that is not one of its figures'
    data URIs, a link out of the page."""
    template = TEMPLATE.read_text()
    tags = set(re.findall(r"<([a-z][a-z0-9]*)", template))
    attributes = set(re.findall(r"\s([a-z-]+)=\"", template))
    out = []
    for tag, attrs in Elements(page).elements:
        if tag not in tags or set(attrs) - attributes or any(a.startswith("on") for a in attrs):
            out.append((tag, attrs))
        elif tag == "img" and not (attrs.get("src") or "").startswith("data:image/png;base64,"):
            out.append((tag, attrs))
        elif tag == "a" and not (attrs.get("href") or "").startswith("#"):
            out.append((tag, attrs))
    return out


PLANTED = {0: ("name", "profile-name", "figure-source", "run-folder-a", "run-folder-b", "key",
               "unit", "metric"),
           1: ("trace", "other-trace", "run-folder-a", "key", "value-a")}


@pytest.mark.slow  # two whole reports drawn
@pytest.mark.parametrize("which", [0, 1])
def test_every_hostile_string_is_text_in_the_page(hostile_reports, which):
    page = (hostile_reports[which] / "index.html").read_text()
    assert foreign_elements(page) == []
    assert "<img src=x" not in page and "<script>" not in page and "<svg" not in page
    text = Elements(page).text
    for where in PLANTED[which]:  # shown, as the text it is
        assert (METRIC if where == "metric" else hostile(where)).split("<svg")[0] in text, where
    assert 'id="hardware"' in page if which == 0 else "No comparison:" in text


def live_markdown(summary: str) -> list:
    """What GitHub would render of summary.md as other than text (without a renderer): any
    `<`, `>` or `&` that is not an entity the report wrote, an unescaped `[`, `]`, backtick
    (the figure list's code spans aside), `$`, `*` or `~`, a `_` that is not inside a word,
    a scheme's `://` or a `www.` that would become links, table rows of more cells than
    their header, and a line that would continue a table (none but a blank line ends one).
    The template's own collapsed section (its `<details>` and `<summary>` lines) is markup."""
    out = []
    text = re.sub(r"`figures/[a-z_]+\.png`", "", summary)
    text = re.sub(r"(?m)^(<details><summary>Every other metric \(\d+\)</summary>|</details>)$",
                  "", text)
    for pattern in (r"[<>]", r"&(?!(amp|lt|gt);)", r"(?<!\\)[\[\]`$*~]",
                    r"(?<!\\)(?:(?<![^\W_])_|_(?![^\W_]))", r"(?<!\\)://", r"(?i)www\."):
        out += [m.group(0) for m in re.finditer(pattern, text)]
    width = None  # of the table the line before belongs to
    for line in summary.splitlines():
        cells = len(re.findall(r"(?<!\\)\|", line)) if line.startswith("|") else None
        if width is not None and (cells != width if cells is not None else line.strip()):
            out.append(line)
        width = cells if width is None else (width if cells is not None else None)
    return out


@pytest.mark.parametrize("which", [0, 1])
def test_every_hostile_string_is_text_in_the_markdown(hostile_reports, which):
    summary = (hostile_reports[which] / "summary.md").read_text()
    assert live_markdown(summary) == []
    assert "name&lt;img src=x onerror=alert(1)&gt;" in summary


@pytest.mark.parametrize("which", [0, 1])
def test_github_renders_the_markdown_as_text(hostile_reports, which):
    """GitHub's renderer itself (cmark-gfm with its extensions), raw HTML let through as an
    unsafe renderer would: only the elements the summary's template writes, no link, no
    image, and each planted string shown whole."""
    import cmarkgfm  # the test extra's
    from cmarkgfm.cmark import Options

    summary = (hostile_reports[which] / "summary.md").read_text()
    html = cmarkgfm.github_flavored_markdown_to_html(summary, options=Options.CMARK_OPT_UNSAFE)
    page = Elements(html)
    assert {t for t, _ in page.elements} <= {"h1", "h2", "p", "ul", "li", "table", "thead",
                                              "tbody", "tr", "th", "td", "code", "details",
                                              "summary"}
    assert all(set(a) <= {"align"} for _, a in page.elements)
    for where in ("name", "profile-name") if which == 0 else ("trace", "run-folder-a"):
        assert hostile(where) in page.text, where


# --- a manifest names files: the report opens none ---------------------------------------

@pytest.fixture(scope="module")
def plain_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("plain")
    (h200,) = modeled_runs(root / "h200")
    (b200,) = modeled_runs(root / "b200", "device=modeled:B200")
    return dict(h200=h200, b200=b200)


@pytest.fixture(scope="module")
def made_report(plain_runs, tmp_path_factory) -> Path:
    """A report of the H200 run, drawn once: a test that needs an earlier report copies it
    (its marker lists the files it holds, so the copy is a report as made)."""
    out = tmp_path_factory.mktemp("made") / "r"
    assert main(["report", str(plain_runs["h200"]), "-o", str(out)]) == 0
    return out


def crafted(run: Path, into: Path, **changes) -> Path:
    """A copy of `run` whose manifest has `changes` (a None value deletes the key)."""
    copy = into / run.name
    shutil.copytree(run, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    for key, value in changes.items():
        if value is None:
            manifest.pop(key, None)
        else:
            manifest[key] = value
    (copy / "manifest.json").write_text(json.dumps(manifest))
    return copy


def report_opening(runs, out) -> tuple:
    """(the report's hardware section, every file it opened): the report in a fresh
    interpreter with an audit hook on open()."""
    code = f"""
        import json, sys
        opened = []
        sys.addaudithook(lambda event, args: opened.append(str(args[0])) if event == "open"
                         else None)
        from harness.commands import main
        status = main(["report", *{[str(r) for r in runs]!r}, "-o", {str(out)!r}])
        print(json.dumps(dict(status=status, opened=opened)))
    """
    result = json.loads(in_subprocess(code).splitlines()[-1])
    assert result["status"] == 0
    page = (out / "index.html").read_text()
    return page[page.index('id="hardware"'):page.index('id="figures"')], result["opened"]


@pytest.mark.slow
@pytest.mark.parametrize("where", ["relative", "absolute"])
def test_a_manifest_naming_a_profile_path_opens_no_file(plain_runs, tmp_path,
                                                       tmp_path_factory, where):
    from engine.devices.profile import DEVICES_DIR

    secret = tmp_path_factory.mktemp("elsewhere") / "secret"
    secret.with_suffix(".yaml").write_text(
        "hbm_gb: {value: 31337.4242, kind: vendor, source: planted-secret-6f1d}\n")
    name = os.path.relpath(secret, DEVICES_DIR) if where == "relative" else str(secret)
    # a name that a lookup by file stem (lower case, '-' for ' ' and '_') would have opened
    assert name == name.lower().replace(" ", "-").replace("_", "-")
    assert (DEVICES_DIR / f"{name}.yaml").resolve() == secret.with_suffix(".yaml")
    run = crafted(plain_runs["h200"], tmp_path, executor=f"modeled:{name}",
                  executor_kind="modeled", profile=name, modeled_device=None,
                  device_profile=None)  # the profile's name, not its figures
    hardware, opened = report_opening([run, plain_runs["b200"]], tmp_path / "r")
    assert "planted-secret-6f1d" not in hardware and "31337" not in hardware
    assert "is not bundled" in hardware and f"{name} (modeled)" in hardware
    assert [p for p in opened if str(secret.parent) in p] == []


@pytest.mark.slow
def test_the_page_shows_the_figures_the_run_recorded(plain_runs, tmp_path):
    """A run's manifest records its profile's figures: the page shows those, whatever the
    bundled profile says today; a manifest from before the key gets today's bundled figures
    of the profile it names exactly, said to be today's."""
    from dataclasses import fields

    from engine.devices.profile import DeviceProfile, load_device_profile, profile_record

    manifest = json.loads((plain_runs["h200"] / "manifest.json").read_text())
    assert manifest["device_profile"] == profile_record(load_device_profile("H200"))
    record = manifest["device_profile"]
    assert list(record) == [f.name for f in fields(DeviceProfile)]  # the files' order
    record["step_overhead_us"] = dict(value=77.0, kind="fitted", source="refitted then")
    then = crafted(plain_runs["h200"], tmp_path / "then", device_profile=record)
    old = crafted(plain_runs["h200"], tmp_path / "old", device_profile=None)
    hardware, opened = report_opening([then, plain_runs["b200"]], tmp_path / "r1")
    assert re.search(r"<td>step_overhead_us</td><td>77</td><td[^>]*>fitted</td>"
                     r"<td[^>]*>refitted then</td>", hardware)
    assert not [p for p in opened if p.endswith("h200.yaml")]  # read from the manifest
    hardware, _ = report_opening([old, plain_runs["b200"]], tmp_path / "r2")
    assert re.search(r"<td>step_overhead_us</td><td>50</td>", hardware)
    assert "as bundled with this steptrace" in hardware


def test_a_capacity_table_naming_a_path_is_refused(plain_runs, tmp_path, capsys):
    """A capacity search's folder stands for the probe its table marks at capacity: a
    run_id that is a path (`../elsewhere`) or null is refused, never followed to a run
    outside."""
    search = tmp_path / "search"
    search.mkdir()
    shutil.copytree(plain_runs["h200"], tmp_path / "elsewhere")
    for run_id in ("../elsewhere", str(tmp_path / "elsewhere"), None):
        pd.DataFrame(dict(run_id=[run_id], at_capacity=[True])).to_parquet(
            search / "capacity.parquet")
        for argv in (["report", str(search), "-o", str(tmp_path / "r")],
                     ["compare", str(search), "--", str(plain_runs["b200"])]):
            assert main(argv) == 2
            out, err = capsys.readouterr()
            says = f"run_id {run_id!r}: expected a probe's folder name" if run_id else \
                "run_id, row 1 (the probe at capacity): expected a probe's folder name, got " \
                "no value (null)"
            assert says in err and err.count("\n") == 1 and out == ""
        assert not (tmp_path / "r").exists()


@pytest.mark.slow  # draws whole reports
def test_a_run_folder_named_like_a_glob_is_read_as_named(plain_runs, tmp_path, capsys):
    run = tmp_path / "[r1]*"
    shutil.copytree(plain_runs["h200"], run)
    assert main(["show", str(run), "--json"]) == 0
    capsys.readouterr()
    assert main(["report", str(run), "-o", str(tmp_path / "r")]) == 0
    assert (tmp_path / "r" / "index.html").is_file()


# --- a report that cannot be written -------------------------------------------------------

def listing(folder: Path) -> list:
    return sorted(p.name for p in folder.iterdir())


def tree(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


@pytest.mark.slow
@pytest.mark.parametrize("earlier", [False, True])
def test_a_report_past_a_file_size_limit_exits_1_and_leaves_the_folder(plain_runs, tmp_path,
                                                                       earlier):
    """A real write error from the kernel (RLIMIT_FSIZE: EFBIG), no injection: exit 1
    naming the file, and DIR as it was: absent, or the earlier report untouched."""
    out = tmp_path / "r"
    if earlier:
        assert main(["report", str(plain_runs["b200"]), "-o", str(out)]) == 0
    before = tree(out) if earlier else None

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 10, 64 << 10))
    proc = subprocess.run([sys.executable, "-m", "harness.commands", "report",
                           str(plain_runs["h200"]), "-o", str(out)], cwd=ROOT,
                          capture_output=True, text=True, preexec_fn=limit, timeout=300)
    assert proc.returncode == 1, proc.stderr
    assert re.fullmatch(rf"steptrace: run failed: cannot write {re.escape(str(out))}/"
                        r"\S+: File too large\n", proc.stderr), proc.stderr
    assert proc.stdout == ""
    assert listing(tmp_path) == (["r"] if earlier else [])
    if earlier:
        assert tree(out) == before


@pytest.mark.slow  # draws whole reports
def test_a_report_whose_folder_cannot_be_renamed_into_place_keeps_the_earlier_one(
        plain_runs, tmp_path, capsys, monkeypatch):
    """ENOSPC at the last step, the rename of the finished folder over DIR: the earlier
    report is put back."""
    out = tmp_path / "r"
    assert main(["report", str(plain_runs["b200"]), "-o", str(out)]) == 0
    before = tree(out)
    rename = os.rename

    def full(src, dst):
        if str(src).endswith(".tmp"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(src))
        rename(src, dst)
    monkeypatch.setattr(os, "rename", full)
    capsys.readouterr()
    assert main(["report", str(plain_runs["h200"]), "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert err == f"steptrace: run failed: cannot write {out}: {os.strerror(errno.ENOSPC)}\n"
    assert listing(tmp_path) == ["r"] and tree(out) == before


def test_bad_input_still_exits_2(plain_runs, tmp_path, capsys):
    file = tmp_path / "a-file"
    file.write_text("not a report")
    assert main(["report", str(plain_runs["h200"]), "-o", str(file)]) == 2
    assert str(file) in capsys.readouterr().err
    assert file.read_text() == "not a report" and listing(tmp_path) == ["a-file"]


# --- a report replaces only a report it made -------------------------------------------

def snapshot(root: Path) -> dict:
    """Everything under `root` as it lies: each file's bytes, each link's target, each
    folder (a link is not followed)."""
    out = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder) / name
            key = str(path.relative_to(root))
            out[key] = ("link", os.readlink(path)) if path.is_symlink() else \
                ("folder",) if path.is_dir() else ("file", path.read_bytes())
    return out


def destination(kind: str, root: Path, run: Path, made: Path) -> tuple:
    """(the -o given, what the refusal says) for a folder a report may not replace, made
    under `root`; `run` is the run folder the report reads, `made` a report of it."""
    def earlier(name="r1"):
        return shutil.copytree(made, root / name)

    root.mkdir()
    if kind == "a site":
        site = root / "site"
        (site / "data").mkdir(parents=True)
        (site / "index.html").write_text("<html>")
        (site / "thesis.tex").write_text("important")
        (site / "data" / "x.csv").write_text("1")
        return site, (f"{site} is not a report: it holds data/, index.html and thesis.tex "
                      f"and no report.json")
    if kind == "results with an index.html":
        results = root / "results"
        shutil.copytree(run, results / "small" / run.name)
        (results / "index.html").touch()
        return results, (f"{results} is not a report: it holds index.html and small/ (1 run) "
                         f"and no report.json")
    if kind == "notes added to a report":
        (earlier() / "MY_NOTES.txt").write_text("mine")
        return root / "r1", (f"{root / 'r1'} holds MY_NOTES.txt, which a new report would "
                             f"delete: move it out first")
    if kind == "a folder added to its figures":
        (earlier() / "figures" / "sub").mkdir()
        (root / "r1" / "figures" / "sub" / "keep.txt").write_text("mine")
        return root / "r1", (f"{root / 'r1'} holds figures/sub/, which a new report would "
                             f"delete: move it out first")
    if kind == "a link to a report":
        earlier()
        (root / "rlink").symlink_to("r1")
        return root / "rlink", f"{root / 'rlink'}: a symbolic link (to r1)"
    if kind == "a marker listing a file of its own":
        site = root / "site"
        site.mkdir()
        (site / "thesis.tex").write_text("important")
        (site / "report.json").write_text(json.dumps(dict(kind="steptrace report",
                                                          files=["thesis.tex"])))
        return site, (f"{site / 'report.json'}: not a report's marker (it lists 'thesis.tex', "
                      f"which a report does not write)")
    if kind == "another run folder":
        other = shutil.copytree(run, root / "other")
        return other / "r", f"{other / 'r'}: lies inside the run folder {other}"
    if kind == "a baseline":
        (root / "base").mkdir()
        (root / "base" / "baseline.json").write_text("{}")
        return root / "base" / "r", f"lies inside the baseline {root / 'base'}"
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["a site", "results with an index.html",
                                  "notes added to a report", "a folder added to its figures",
                                  "a link to a report", "a marker listing a file of its own",
                                  "another run folder", "a baseline"])
def test_a_report_replaces_only_a_report_it_made(plain_runs, made_report, tmp_path, capsys,
                                                 kind):
    """A folder holding an index.html is not thereby a report: only one holding the marker
    a report writes and nothing but the files it lists is replaced. Anything else is
    refused, exit 2, one line naming what it holds, and every file and link stays as it
    was (a link to a report is not swapped for a folder, and no `.old` is left)."""
    run = shutil.copytree(plain_runs["h200"], tmp_path / "runs" / plain_runs["h200"].name)
    out, says = destination(kind, tmp_path / "here", run, made_report)
    before = snapshot(tmp_path)
    capsys.readouterr()
    assert main(["report", str(run), "-o", str(out)]) == 2
    stdout, err = capsys.readouterr()
    assert stdout == "" and err.count("\n") == 1 and says in err, err
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("where", ["is", "inside", "holds"])
def test_a_report_is_never_written_into_a_run_it_reads(plain_runs, tmp_path, capsys, where):
    """`touch RUN/index.html; report RUN -o RUN` used to delete the run's manifest and
    tables; a report inside the run, or around it, is refused as well."""
    run = shutil.copytree(plain_runs["h200"], tmp_path / "results" / "run")
    (run / "index.html").touch()
    out = {"is": run, "inside": run / "report", "holds": tmp_path / "results"}[where]
    before = snapshot(tmp_path)
    assert main(["report", str(run), "-o", str(out)]) == 2
    stdout, err = capsys.readouterr()
    word = {"is": "is", "inside": "lies inside", "holds": "holds"}[where]
    assert stdout == "" and f"{out}: {word} the run folder {run}, which the report reads" in err
    assert snapshot(tmp_path) == before


@pytest.mark.slow  # draws whole reports
def test_a_file_put_in_the_report_while_it_is_drawn_is_kept(plain_runs, made_report, tmp_path,
                                                            capsys, monkeypatch):
    """The destination is checked again just before the swap: notes saved into an earlier
    report while the new one was drawn are not deleted with it."""
    build = importlib.import_module("harness.analysis.report.build")
    out = shutil.copytree(made_report, tmp_path / "r")
    earlier = snapshot(out)
    write = build._write

    def write_and_note(tmp, dest, name, data):
        write(tmp, dest, name, data)
        (out / "MY_NOTES.txt").write_text("written while the report was drawn")
    monkeypatch.setattr(build, "_write", write_and_note)
    capsys.readouterr()
    assert main(["report", str(plain_runs["h200"]), "-o", str(out)]) == 2
    stdout, err = capsys.readouterr()
    assert stdout == "" and err.count("\n") == 1, err
    assert "MY_NOTES.txt, which a new report would delete" in err, err
    assert snapshot(out) == {**earlier, "MY_NOTES.txt": snapshot(out)["MY_NOTES.txt"]}
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


@pytest.mark.slow  # draws whole reports
def test_a_report_is_written_where_nothing_is_lost(plain_runs, tmp_path, capsys):
    """A new folder (its parents made), an empty one, and a report it made, even one a
    figure was deleted from: each written, its marker listing every file it holds."""
    empty = tmp_path / "empty"
    empty.mkdir()
    for out in (tmp_path / "a" / "b" / "new", empty, empty):
        assert main(["report", str(plain_runs["h200"]), "-o", str(out), "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["dir"] == str(out)
        marker = json.loads((out / "report.json").read_text())
        assert (marker["kind"], marker["command"]) == (
            "steptrace report", f"steptrace report {plain_runs['h200']} -o {out}")
        assert sorted(marker["files"]) == sorted(
            str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()
            and p.name != "report.json")
        (out / "figures" / "itl.png").unlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "empty"]  # nothing hidden left


# --- the harness's children import nothing from the working directory ------------------

STEPTRACE = Path(sys.executable).parent / "steptrace"  # the console script, as users run it
# What the children (and their boot code) import, and the harness package itself: the
# editable install finds `harness` through its import hook, an ordinary install on the path
PLANTED_MODULES = ("fcntl", "pyarrow", "numpy", "json", "runpy", "psutil", "harness/__init__",
                   "harness/record/__init__", "harness/record/table_writer",
                   "harness/telemetry/__init__", "harness/telemetry/child")


def planted(tmp_path) -> Path:
    """A working directory of planted modules; each marks `tmp_path / marks` when imported."""
    folder, marks = tmp_path / "cwd", tmp_path / "marks"
    marks.mkdir()
    for name in PLANTED_MODULES:
        path = folder / f"{name}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"open({str(marks / name.replace('/', '.'))!r}, 'w').close()\n")
    return folder


def marks(tmp_path):
    return sorted(p.name for p in (tmp_path / "marks").iterdir())


@pytest.mark.slow
def test_a_run_started_among_planted_modules_imports_none_of_them(tmp_path):
    workload = tmp_path / "w.yaml"
    workload.write_text(MODELED.replace("telemetry: {enabled: false}",
                                        "telemetry: {interval_s: 0.05}")
                        + f"output: {tmp_path / 'results'}\nname: small\n")
    done = subprocess.run([str(STEPTRACE), "run", str(workload)], cwd=planted(tmp_path),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert marks(tmp_path) == []
    (run_dir,) = (p.parent for p in (tmp_path / "results" / "small").glob("*/manifest.json"))
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["complete"]
    assert "exited" not in manifest["telemetry"].get("sampler", "")  # the child did not fail
    assert len(pd.read_parquet(run_dir / "steps.parquet")) > 0


def test_the_table_writer_imports_nothing_from_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(planted(tmp_path))
    out = tmp_path / "run"
    out.mkdir()
    writer = TableWriter(out, "parquet", ["batches"], dict(run_id="r"),
                         dict(kind=("chunk", "final", "decode"), role=("colocated",)))
    writer.write(dict(batches=dict(role=np.zeros(3, np.int8), instance=np.zeros(3, np.int32),
                                   step=np.arange(3), dp_rank=np.zeros(3, np.int32),
                                   seq_id=np.arange(3), kind=np.arange(3, dtype=np.int8),
                                   seqlen_q=np.ones(3, np.int32),
                                   seqlen_k=np.ones(3, np.int32))))
    writer.close()
    assert pd.read_parquet(out / "batches.parquet")["kind"].tolist() == ["chunk", "final",
                                                                         "decode"]
    assert marks(tmp_path) == []


def test_the_telemetry_child_imports_nothing_from_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(planted(tmp_path))
    sampler = Sampler("cpu", [], 0.05, time.perf_counter(), os.getpid())
    sampler.start()
    wait_for_samples(sampler, 2)
    frame, notes = sampler.stop()
    assert len(frame) >= 2 and notes["cpu"].startswith("psutil ")
    assert marks(tmp_path) == []


def test_a_child_imports_what_this_process_imported(tmp_path, monkeypatch):
    """The child's path is this process's less the working directory: the probe, found
    only on this process's path, sees the parent's harness and nothing planted."""
    probe = tmp_path / "probe"
    probe.mkdir()
    (probe / "steptrace_probe.py").write_text(textwrap.dedent("""
        import json, sys
        import harness
        print(json.dumps(dict(path=sys.path, harness=harness.__file__,
                              isolated=sys.flags.isolated)))
    """))
    monkeypatch.syspath_prepend(str(probe))
    cwd = planted(tmp_path)
    monkeypatch.chdir(cwd)
    monkeypatch.syspath_prepend(str(cwd))  # as `python -m` or `python -c` here would have it
    monkeypatch.setattr(sys, "path", ["", "relative", *sys.path])
    expected = child_process.import_path()
    done = subprocess.run(child_process.command("steptrace_probe"), capture_output=True,
                          text=True, timeout=60, check=True)
    child = json.loads(done.stdout)
    assert child["path"] == expected and child["isolated"] == 1
    assert str(cwd) not in child["path"] and "" not in child["path"]
    assert str(probe) in child["path"] and child["harness"] == harness.__file__
    assert marks(tmp_path) == []


def test_the_harness_root_stays_on_the_path_when_it_is_the_working_directory(monkeypatch):
    monkeypatch.chdir(child_process.HARNESS_ROOT)
    monkeypatch.setattr(sys, "path", ["", child_process.HARNESS_ROOT, *sys.path[1:]])
    path = child_process.import_path()
    assert path.count(child_process.HARNESS_ROOT) == 1 and "" not in path
    monkeypatch.setattr(sys, "path", [p for p in sys.path
                                      if os.path.realpath(p) != child_process.HARNESS_ROOT])
    assert child_process.import_path()[0] == child_process.HARNESS_ROOT  # found by a hook


# --- a sweep writes, and resumes (deletes), only in folders of its own -------------------

@pytest.mark.parametrize("at", ["<output>/<name>", "points", "points/<key>"])
def test_a_symbolic_link_in_a_sweeps_folder_is_refused_and_nothing_is_deleted(tmp_path,
                                                                              capsys, at):
    """Resume removes a point folder without point.json: through a link planted at the
    sweep's folder, its points/ or a point's folder it would delete files elsewhere."""
    from harness.sweeps.points.execute import plan
    from tests.test_sweep_points import sweep_file

    path = sweep_file(tmp_path, "base: base.yaml\naxes: {device: [modeled:B200]}\n")
    out = tmp_path / "out"
    (key,) = [p.key for p in plan(path, (f"output={out}",)).unique]
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / key).mkdir(parents=True)  # what a resume would take for a partial point
    (elsewhere / key / "keep").write_text("the user's")
    (elsewhere / "points").symlink_to(elsewhere)
    link = {"<output>/<name>": out / "s", "points": out / "s" / "points",
            "points/<key>": out / "s" / "points" / key}[at]
    link.parent.mkdir(parents=True)
    link.symlink_to(elsewhere / key if at == "points/<key>" else elsewhere)
    assert main(["sweep", str(path), "--set", f"output={out}", "--json"]) == 2
    out_text, err = capsys.readouterr()
    assert err.count("\n") == 1 and f"{link} is a symbolic link (to " in err
    assert json.loads(out_text)["exit_code"] == 2
    assert (elsewhere / key / "keep").read_text() == "the user's"
    assert sorted(p.name for p in (elsewhere / key).iterdir()) == ["keep"]


def test_a_point_never_removes_an_attempt_through_a_link(tmp_path):
    """The points an optuna or P/D ratio search draws as it goes: their folder, or its
    points/, a link refused where the point starts."""
    from harness.sweeps.points import marker
    from harness.sweeps.points.owner import LinkRefused

    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "k").mkdir(parents=True)
    (elsewhere / "k" / "keep").write_text("the user's")
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "points").symlink_to(elsewhere)
    (tmp_path / "t" / "points").mkdir(parents=True)
    (tmp_path / "t" / "points" / "k").symlink_to(elsewhere / "k")
    for folder in (tmp_path / "s" / "points" / "k", tmp_path / "t" / "points" / "k"):
        with pytest.raises(LinkRefused, match="is a symbolic link"):
            marker.fresh(folder)
    assert (elsewhere / "k" / "keep").read_text() == "the user's"


@pytest.mark.parametrize("name", [".sweep.parquet.tmp", "sweep.parquet"])
def test_a_sweep_writes_its_table_through_no_link_in_its_folder(tmp_path, capsys,
                                                                 monkeypatch, name):
    """A link planted at the table's temporary name would take the table's bytes (and the
    rename, the link itself into the table's place); at the table's own name the rename
    replaces the link, never what it points to."""
    from contextlib import contextmanager

    from harness.sweeps.points import pool
    from tests.test_sweep_folder import InProcess
    from tests.test_sweep_points import sweep_file

    @contextmanager
    def here(workers):
        yield InProcess()
    monkeypatch.setattr(pool, "host_pool", here)
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's")
    link = tmp_path / "out" / "s" / name
    link.parent.mkdir(parents=True)
    link.symlink_to(victim)
    path = sweep_file(tmp_path, "base: base.yaml\naxes: {device: [modeled:B200]}\n")
    status = main(["sweep", str(path), "--set", f"output={tmp_path / 'out'}", "--json"])
    out, err = capsys.readouterr()
    assert victim.read_text() == "the user's"
    table = tmp_path / "out" / "s" / "sweep.parquet"
    if name == "sweep.parquet":
        assert status == 0 and table.is_file() and not table.is_symlink()
        return
    assert status == 2 and json.loads(out)["exit_code"] == 2
    assert err.splitlines()[-1] == (f"steptrace: error: {link} is a symbolic link (to "
                                    f"{victim}): a table is written only to a file of its "
                                    f"own; remove the link")
    assert link.is_symlink() and not os.path.lexists(table)


def test_a_runs_table_is_written_through_no_link_at_its_temporary_name(tmp_path):
    from harness.errors import BadInput
    from harness.record.table_sink import write_table

    victim = tmp_path / "victim.txt"
    victim.write_text("the user's")
    (tmp_path / "run" / ".summary.parquet.tmp").parent.mkdir()
    (tmp_path / "run" / ".summary.parquet.tmp").symlink_to(victim)
    with pytest.raises(BadInput, match=r"\.summary\.parquet\.tmp is a symbolic link \(to "):
        write_table(pd.DataFrame({"metric": ["x"], "stat": ["mean"], "value": [1.0],
                                  "unit": ["s"]}), tmp_path / "run",
                    "summary", "parquet")
    assert victim.read_text() == "the user's"
    assert not os.path.lexists(tmp_path / "run" / "summary.parquet")
