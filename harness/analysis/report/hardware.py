"""The device profiles behind modeled arms: each figure with its kind and source, read from
the profile YAML shipped with the engine package (located, never imported)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import List, Optional

import yaml


def _devices_dir() -> Optional[Path]:
    spec = importlib.util.find_spec("engine")
    for where in (spec.submodule_search_locations or []) if spec else []:
        path = Path(where) / "devices"
        if path.is_dir():
            return path
    return None


def profile_figures(device: str) -> List[dict]:
    """[{figure, value, kind, source}] of the bundled profile named `device` ("B200",
    "Ascend 950DT"), every figure in the file's order (a null one: not published); empty
    where no bundled profile has that name."""
    where = _devices_dir()
    stem = device.strip().lower().replace(" ", "-").replace("_", "-")
    path = where / f"{stem}.yaml" if where else None
    if path is None or not path.is_file():
        return []
    data = yaml.safe_load(path.read_text()) or {}
    out = []
    for name, value in data.items():
        entries = value.items() if name == "peak_tflops" and isinstance(value, dict) \
            else [(None, value)]
        for sub, v in entries:
            label = f"{name}.{sub}" if sub else name
            if isinstance(v, dict):
                out.append(dict(figure=label, value=v.get("value"), kind=v.get("kind", ""),
                                source=v.get("source", "")))
            elif v is None:
                out.append(dict(figure=label, value=None, kind="not published", source=""))
    return out
