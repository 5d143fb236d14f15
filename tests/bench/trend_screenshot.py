"""docs/comparing.md's picture of a trend page: `steptrace report --history STORE`, opened in
headless chromium (tests/browser.py), the page down to its first figure saved as a palette
PNG.

    python -m tests.bench.trend_screenshot STORE OUT.png [--metric throughput.output_tokens]
        [--noise-floor CLASS=PCT ...]

`--metric` keeps one metric's series (a copy of the store of that name, filtered, in a
scratch folder); `--noise-floor` goes to `report --history`; the picture is of the page as
it writes it.
"""

from __future__ import annotations

import argparse
import base64
import io
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from harness.analysis import history_store
from tests.browser import Page

REPO = Path(__file__).resolve().parents[2]

WIDTH = 1280  # tests/browser.py's window
BOTTOM = """(() => { const img = document.querySelector('img');
  return img.getBoundingClientRect().bottom + window.scrollY + 16; })()"""
COLOURS = 64  # a palette PNG of the page's few colours: tens of KB, not hundreds


def only(store: Path, metric: str, into: Path) -> Path:
    """A copy of `store` holding only `metric`'s rows (each run's file, filtered)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    name, _, stat = metric.partition(".")
    into.mkdir()
    for path in history_store.files(store):
        table = pq.read_table(path)
        keep = pc.and_(pc.equal(table["metric"], name), pc.equal(table["stat"], stat))
        pq.write_table(table.filter(keep), into / path.name)
    return into


def shoot(page_dir: Path, out: Path) -> None:
    from PIL import Image

    page = Page((page_dir / "index.html").resolve().as_uri())
    try:
        height = page.evaluate(BOTTOM)  # the page down to its first figure
        data = page.call("Page.captureScreenshot", session=True, format="png", clip=dict(
            x=0, y=0, width=WIDTH, height=height, scale=1), captureBeyondViewport=True)["data"]
    finally:
        page.close()
    image = Image.open(io.BytesIO(base64.b64decode(data))).convert("RGB")
    image.quantize(colors=COLOURS).save(out, optimize=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.bench.trend_screenshot")
    p.add_argument("store", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--metric", help="one metric's series (metric.stat)")
    p.add_argument("--noise-floor", action="append", default=[], metavar="CLASS=PCT",
                   help="as `report --history --noise-floor` (repeatable)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        store = args.store.resolve()
        if args.metric:  # the page's title names the store: its own name, not a scratch path
            store = only(store, args.metric, Path(scratch, args.store.resolve().name))
        report = Path(scratch, "trend")
        floors = [a for f in args.noise_floor for a in ("--noise-floor", f)]
        subprocess.run([sys.executable, "-m", "harness.commands", "report", "--history",
                        str(store.relative_to(scratch) if args.metric else store), "-o",
                        str(report), *floors], cwd=scratch, check=True, stdout=subprocess.DEVNULL,
                       env=dict(os.environ, PYTHONPATH=str(REPO)))
        shoot(report, args.out.resolve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
