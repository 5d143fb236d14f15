"""The device profile behind a modeled arm: each figure with its kind and source, as the
run's manifest records the profile the run used (`device_profile`).

A manifest names files (its executor may say `modeled:../../x` or `modeled:/etc/x`), and a
report is made of folders other people wrote: it never opens a file a manifest names. A
manifest from before `device_profile` gets the figures of the bundled profile whose name
it gives exactly, from the engine package's YAML as installed (located, never imported),
said to be today's; any other name gets none.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List

import yaml

from ...errors import BadInput
from .headline import fmt


@dataclass
class Profile:
    figures: List[dict] = field(default_factory=list)  # {figure, value, kind, source}
    note: str = ""  # where the figures come from when not from the run, or why there are none


def profile(run) -> Profile:
    """The figures of a modeled run's device profile, in the profile's order."""
    record = run.manifest.device_profile
    if record is not None:
        if not isinstance(record, dict):
            raise BadInput(f"{run.dir / 'manifest.json'}: device_profile: expected the "
                           f"profile's fields (a mapping), got {type(record).__name__}")
        return Profile(figures(record))
    path = bundled().get(run.profile.strip().lower().replace(" ", "-").replace("_", "-"))
    if path is None:
        return Profile(note=f"The profile {run.profile} is not bundled with this steptrace "
                            f"and the run's manifest does not record its figures: none shown.")
    return Profile(figures(yaml.safe_load(path.read_text()) or {}),
                   "The run's manifest does not record the figures it used: these are the "
                   "profile's as bundled with this steptrace, which may have been refitted "
                   "since.")


def bundled() -> Dict[str, Path]:
    """The bundled profiles by file stem ("h200", "ascend-950dt"): a name is looked up in
    this listing, never joined onto a path."""
    spec = importlib.util.find_spec("engine")
    for where in (spec.submodule_search_locations or []) if spec else []:
        path = Path(where) / "devices"
        if path.is_dir():
            return {p.stem: p for p in sorted(path.glob("*.yaml"))}
    return {}


def figures(data: dict) -> List[dict]:
    """[{figure, value, kind, source}] of a profile's fields as plain data: every figure
    (`{value, kind, source}`; null: not published), peak_tflops one per precision; the
    text fields (name, vendor, source) are not figures."""
    out = []
    for name, value in data.items():
        entries = value.items() if name == "peak_tflops" and isinstance(value, dict) \
            else [(None, value)]
        for sub, v in entries:
            label = f"{name}.{sub}" if sub else str(name)
            if isinstance(v, dict):
                out.append(dict(figure=label, value=_number(v.get("value")),
                                kind=str(v.get("kind", "")), source=str(v.get("source", ""))))
            elif v is None:
                out.append(dict(figure=label, value=None, kind="not published", source=""))
    return out


def _number(value):
    """A figure's value as the page prints it: a number formatted, null kept, else text."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return fmt(float(value))
    return None if value is None else str(value)
