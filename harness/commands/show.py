"""steptrace show RUN_DIR: a run's state and headline summary rows; given a capacity
search's folder, the search's answer and probes as `steptrace capacity` printed them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from engine.files import check_regular

from ..errors import BadInput
from ..record.run_folder import read
from ..schema.summary import COUNT_UNITS, HEADLINE
from .common import add_json, print_json


def add(p) -> None:
    p.add_argument("run_dir", type=Path)
    add_json(p)
    p.set_defaults(handler=main)


def main(args) -> int:
    if not (args.run_dir / "manifest.json").exists():  # perhaps a capacity search's folder
        from . import capacity  # here: `run` imports this module for print_text, not that one

        search = args.run_dir / capacity.RESULT_FILE
        if search.exists():
            return _show(args, _read_search(search), capacity.print_text)
    return _show(args, read(args.run_dir), print_text)  # --json: every summary row


def _show(args, result: dict, text: Callable[[dict], None]) -> int:
    if args.json:
        print_json(result)
    else:
        text(result)
    return 0


def _read_search(path: Path) -> dict:
    """A capacity search's --json document, as the search wrote it in its folder."""
    try:  # a FIFO in its place would block the reader for ever
        return json.loads(check_regular(path).read_text())
    except (OSError, ValueError) as e:
        raise BadInput(f"{path}: unreadable ({e})") from None


def print_text(result: dict) -> None:
    state = result["state"] if result["complete"] else result["state"].upper()
    modeled = " (modeled)" if result["modeled"] else ""
    print(f"{result['run_dir']}  [{state}]  device {result['device']}{modeled}, "
          f"gil {result['gil_mode']}")
    rows = {(r["metric"], r["stat"]): r for r in result["summary"]}
    # the device table's utilisation and power means, and energy per token, side by side
    telemetry = [k for k, r in rows.items() if (k[1] == "mean" and r["unit"] in ("%", "W"))
                 or k[0] == "energy_per_output_token"]
    for key in HEADLINE + telemetry:
        if key in rows:
            r = rows[key]
            print(f"  {key[0] + ' ' + key[1]:28}{_number(r):>14} {r['unit']}")
    for note in result.get("notes", ()):
        print(f"  note: {note}")


def _number(row: dict) -> str:
    """A count as an integer (19,370 requests, not 1.937e+04); anything else to 4 digits."""
    value = row["value"]
    count = row["unit"] in COUNT_UNITS or row["stat"] == "count"
    return f"{value:,.0f}" if count and float(value).is_integer() else f"{value:.4g}"
