"""Kernel tables: what one layer's kernels take on one device, by op family and shape.

One CSV file per device profile and software stack (engine/kernels/<profile>/<stack>.csv),
`# key: value` lines first (KEYS: the profile, the stack, where the data came from, its
licence), then one row per measured or derived shape (COLUMNS). docs/modeling.md,
"Kernel tables", states the format; tests/test_kernel_tables.py holds the files to it.

A curve is the rows of one family that agree on every key but `tokens` and `context`: the
step looks a shape up on its curve (engine/kernels/lookup.py; csrc/kernel_curve.cpp),
log-log in tokens and linear in context, and says when the shape lies outside the rows.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Tuple

from fileio.regular import check_regular

# family -> what `tokens` counts for it, and the keys its rows carry besides tokens
FAMILIES: Mapping[str, Tuple[str, Tuple[str, ...]]] = {
    "gemm": ("rows (m) of one GEMM", ("precision", "n", "k")),
    "moe": ("tokens the whole EP group routes through one MoE layer (before top-k)",
            ("precision", "n", "k", "experts", "topk", "width", "mode")),
    "mla_decode": ("decoding sequences on the device, each over `context` keys",
                   ("precision", "heads")),
    "mla_prefill": ("prompt tokens of one sequence, after `context` cached ones",
                    ("precision", "heads")),
    "mla_bmm": ("tokens through the absorbed MLA's batched GEMM", ("precision", "heads", "mode")),
    # DeepSeek-V4's attention module whole (projections, compressor, indexer, attention,
    # grouped output), one layer of a compress ratio (mode); n: the model's hidden size
    "v4_decode": ("decoding sequences on the device, each over `context` keys",
                  ("precision", "heads", "n", "mode")),
    "v4_prefill": ("prompt tokens of one sequence, after `context` cached ones",
                   ("precision", "heads", "n", "mode")),
    "small": ("tokens through the layer's norms, RoPE, routing and quantisation", ("n",)),
    "dispatch": ("tokens each rank sends", ("precision", "n", "topk", "experts", "width",
                                             "topology", "mode")),
    "combine": ("tokens each rank receives back", ("precision", "n", "topk", "experts",
                                                   "width", "topology", "mode")),
    "all_reduce": ("tokens of `n` activations reduced", ("precision", "n", "width",
                                                         "topology")),
    "all_gather": ("tokens of `n` activations gathered", ("precision", "n", "width",
                                                          "topology")),
    "kv_copy": ("tokens of KV copied to another device", ("precision", "n", "topology")),
}
PRECISIONS = ("bf16", "fp8", "fp4", "int8", "")
TOPOLOGIES = ("", "scaleup", "scaleout")
# dispatch/combine: DeepEP's low-latency (decode) and normal (prefill) kernels, and moe: the
# grouped GEMMs that take their layouts (masked, contiguous); mla_bmm: the absorbed form's
# first (pre) and second (post) product; v4_*: the layer's compressed attention, CSA
# (compress ratio 4, indexed) or HCA (128)
MODES = ("", "low_latency", "normal", "pre", "post", "csa", "hca")
SOURCES = ("measured", "vendor", "roofline", "fitted")
# name -> (type, meaning); the file's columns, in this order
COLUMNS: Mapping[str, Tuple[type, str]] = {
    "family": (str, "op family (FAMILIES)"),
    "mode": (str, "kernel mode (MODES), empty where the family has one"),
    "precision": (str, "GEMM and expert weights, attention's KV cache, or a collective's "
                       "payload"),
    "tokens": (int, "the family's count (FAMILIES), >= 1"),
    "context": (int, "attention: KV length a sequence attends over; 0 elsewhere"),
    "n": (int, "GEMM output columns; the hidden size of MoE, V4 attention, small kernels, "
               "collectives"),
    "k": (int, "GEMM reduction depth; MoE: the experts' intermediate size"),
    "heads": (int, "attention: heads on the device"),
    "experts": (int, "MoE, dispatch, combine: routed experts of the model"),
    "topk": (int, "experts a token is routed to"),
    "width": (int, "EP width (MoE, all-to-all) or group size (all-reduce, all-gather)"),
    "topology": (str, "collectives: within one scale-up domain or across (TOPOLOGIES)"),
    "time_us": (float, "one call on one device, in microseconds"),
    "source": (str, "measured | vendor | roofline | fitted (SOURCES)"),
}
KEYS = ("profile", "stack", "source", "notice")  # the `# key: value` lines, in this order
CURVE_KEYS = tuple(c for c in COLUMNS if c not in ("tokens", "context", "time_us", "source"))


class KernelTableError(ValueError):
    """A kernel table that breaks the format: str() names the file, the line and why."""


@dataclass(frozen=True)
class Row:
    family: str
    mode: str
    precision: str
    tokens: int
    context: int
    n: int
    k: int
    heads: int
    experts: int
    topk: int
    width: int
    topology: str
    time_us: float
    source: str

    @property
    def curve(self) -> Tuple:
        return tuple(getattr(self, c) for c in CURVE_KEYS)


@dataclass(eq=False)  # one table is one object: its curves are cached by identity
class KernelTable:
    profile: str
    stack: str
    source: str
    notice: str
    rows: List[Row] = field(default_factory=list)

    def curves(self) -> Dict[Tuple, List[Row]]:
        """The rows of each curve, by its keys (CURVE_KEYS)."""
        out: Dict[Tuple, List[Row]] = {}
        for row in self.rows:
            out.setdefault(row.curve, []).append(row)
        return out


def _field(raw: str, name: str, where: str):
    kind = COLUMNS[name][0]
    if kind is str:
        return raw
    try:
        value = kind(raw)
    except ValueError:
        raise KernelTableError(f"{where}: {name} {raw!r} is not {kind.__name__}") from None
    if kind is float and not (math.isfinite(value) and value > 0):
        raise KernelTableError(f"{where}: {name} must be a finite time > 0, got {raw}")
    if kind is int and value < 0:
        raise KernelTableError(f"{where}: {name} must be >= 0, got {raw}")
    return value


def _check_row(row: Row, where: str) -> None:
    if row.family not in FAMILIES:
        raise KernelTableError(f"{where}: family {row.family!r} is not one of "
                               f"{', '.join(FAMILIES)}")
    for name, allowed in (("precision", PRECISIONS), ("topology", TOPOLOGIES),
                          ("mode", MODES), ("source", SOURCES)):
        if getattr(row, name) not in allowed:
            raise KernelTableError(f"{where}: {name} {getattr(row, name)!r} is not one of "
                                   f"{', '.join(repr(a) for a in allowed)}")
    if row.tokens < 1:
        raise KernelTableError(f"{where}: tokens must be >= 1, got {row.tokens}")


def read(path) -> KernelTable:
    """The table at `path`, every line checked; KernelTableError names the line at fault."""
    path = check_regular(path)
    meta: Dict[str, str] = {}
    rows: List[Row] = []
    with open(path, newline="", encoding="utf-8") as f:
        lines = iter(enumerate(f, 1))
        header: Optional[List[str]] = None
        for number, line in lines:
            if line.startswith("#"):
                key, sep, value = line[1:].partition(":")
                if not sep or key.strip() not in KEYS:
                    raise KernelTableError(f"{path}:{number}: expected '# key: value' with a "
                                           f"key of {', '.join(KEYS)}")
                meta[key.strip()] = value.strip()
                continue
            header = next(csv.reader([line]))
            break
        if header != list(COLUMNS):
            raise KernelTableError(f"{path}: expected the header {','.join(COLUMNS)}, got "
                                   f"{','.join(header or [])!r}")
        missing = [k for k in KEYS if k not in meta]
        if missing:
            raise KernelTableError(f"{path}: no '# {missing[0]}: ...' line before the header")
        for number, line in lines:
            where = f"{path}:{number}"
            values = next(csv.reader([line]))
            if len(values) != len(COLUMNS):
                raise KernelTableError(f"{where}: expected {len(COLUMNS)} fields, got "
                                       f"{len(values)}")
            row = Row(*(_field(v, name, where) for v, name in zip(values, COLUMNS)))
            _check_row(row, where)
            rows.append(row)
    table = KernelTable(meta["profile"], meta["stack"], meta["source"], meta["notice"], rows)
    _check_grids(table, path)
    return table


def _check_grids(table: KernelTable, path) -> None:
    """Every curve a full grid: each of its contexts holds the same tokens, once each."""
    for curve, rows in table.curves().items():
        grid: Dict[int, List[int]] = {}
        for row in rows:
            grid.setdefault(row.context, []).append(row.tokens)
        first = sorted(next(iter(grid.values())))
        for context, tokens in grid.items():
            if sorted(tokens) != first or len(set(tokens)) != len(tokens):
                raise KernelTableError(
                    f"{path}: the {curve[0]} curve {dict(zip(CURVE_KEYS, curve))} is not a "
                    f"full grid: context {context} has tokens {sorted(tokens)}, expected "
                    f"{first} once each")


def write(table: KernelTable, path) -> None:
    """`table` at `path`, rows sorted by curve, context and tokens (identical bytes for an
    identical table)."""
    path = Path(path)
    rows = sorted(table.rows, key=lambda r: (r.curve, r.context, r.tokens))
    with open(path, "w", newline="", encoding="utf-8") as f:
        for key in KEYS:
            f.write(f"# {key}: {getattr(table, key)}\n")
        out = csv.writer(f, lineterminator="\n")
        out.writerow(COLUMNS)
        for r in rows:
            out.writerow([f"{r.time_us:.6g}" if name == "time_us" else getattr(r, name)
                          for name in COLUMNS])
