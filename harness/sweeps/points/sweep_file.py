"""The sweep file (docs/sweeps.md): the base workload, the mode, the axes and how they
combine, read and checked whole before any point resolves; every error names the file,
the line and the key."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Collection, Dict, Optional, Tuple

from fileio.regular import NotAFile, check_regular
from fileio.yaml_lines import KeyPath, YamlError, load_with_lines

from ...workload.schema import SCHEMA
from ..frontier.options import (
    KEYS as FRONTIER_KEYS,
    SET_BY_SEARCH,
    FrontierOptions,
    read as frontier_options,
)
from .expand import MAX_POINTS, count, dimensions
from .pd_ratio_keys import INSTANCES, MAX_NEAR
from .where import WhereError, compile_where, digits_limit, shown

MODES = ("run", "capacity")
METHODS = ("grid", "random", "optuna", "pd_ratio", "frontier")
# optuna's objective: an answer's column of the sweep table (docs/sweeps.md, "The table")
OBJECTIVES = ("output_tokens_per_device", "output_tokens_per_s", "tokens_per_s_per_user",
              "goodput", "attainment", "rate", "ttft_p50_s", "ttft_p99_s", "tpot_p50_s",
              "tpot_p99_s")
DIRECTIONS = ("maximize", "minimize")
SEARCH_KEYS = {"grid": (), "random": ("n", "seed"),
               "optuna": ("n", "seed", "objective", "direction"), "pd_ratio": ("near", "most"),
               "frontier": FRONTIER_KEYS}
KEYS = ("name", "base", "mode", "axes", "zip", "where", "search", "ray", "prices")
PLACED = ("output",)  # set by the sweep for each point: not an axis


class SweepError(ValueError):
    """The sweep file is wrong (bad input): the message names the file, line and key."""


@dataclass(frozen=True)
class SweepFile:
    path: Path
    name: str
    base: Path  # the base workload, resolved against the sweep file's folder
    mode: str
    axes: Dict[str, Tuple[Any, ...]]  # workload key path -> its values, in the file's order
    zips: Tuple[Tuple[str, ...], ...] = ()
    where: Optional[str] = None
    method: str = "grid"
    n: Optional[int] = None  # random, optuna: how many points
    seed: int = 0
    objective: Optional[str] = None  # optuna: the column it optimizes
    direction: str = "maximize"
    ray_address: Optional[str] = None  # ray.address: the points run on that Ray cluster
    near: int = 1  # pd_ratio: instance counts searched either side of the balance
    most: int = 8  # pd_ratio: the most instances of one pool searched
    frontier: Optional[FrontierOptions] = None  # frontier: its keys
    # a device (as `device` names it) -> dollars per device-hour (docs/sweeps.md, "Cost")
    prices: Dict[str, float] = field(default_factory=dict)
    lines: Dict[KeyPath, int] = field(default_factory=dict, compare=False, repr=False)

    def at(self, key: KeyPath) -> str:
        """`file:line: key.path`, as an error names a key of the file."""
        line = self.lines.get(key) or self.lines.get(key[:1])
        return f"{self.path}{f':{line}' if line else ''}: {'.'.join(key)}"


def load_sweep(path) -> SweepFile:
    """The sweep file read and checked; SweepError naming file, line and key."""
    path = Path(path)
    try:
        data, lines = load_with_lines(check_regular(path))
    except (NotAFile, YamlError) as e:
        raise SweepError(str(e)) from None
    except ValueError:  # an integer of more digits than Python converts
        raise SweepError(f"{path}: expected numbers of at most {digits_limit():,} digits, got "
                         f"a longer integer") from None
    except OSError as e:
        raise SweepError(f"{path}: {e.strerror}") from None

    def fail(key: KeyPath, message: str):
        line = lines.get(key) or lines.get(key[:1])
        where = f"{path}:{line}" if line else str(path)
        raise SweepError(f"{where}: {'.'.join(key) or '(top level)'}: {message}")

    if not isinstance(data, dict):
        fail((), f"expected a mapping of {', '.join(KEYS)}, got {type(data).__name__}")
    unknown = sorted(set(data) - set(KEYS))
    if unknown:
        fail((unknown[0],), f"unknown key; expected one of {', '.join(KEYS)}")
    axes = _axes(data.get("axes"), fail)
    zips = _zips(data.get("zip"), axes, fail)
    _once(axes, zips, fail)
    search = _search(data.get("search"), fail)
    where = _where(data.get("where"), axes, search.get("method", "grid"), fail)
    mode = _choice(data, "mode", MODES, fail)
    if search.get("method") == "pd_ratio":
        _pd_ratio(mode, axes, fail)
    if search.get("method") == "frontier":
        _frontier(mode, axes, fail)
    _planned(axes, zips, search, where, fail)
    return SweepFile(path, _name(data, path, fail), _base(data, path, fail), mode, axes,
                     zips, where, **search, ray_address=_ray(data, fail),
                     prices=_prices(data, fail), lines=lines)


def _frontier(mode: str, axes, fail) -> None:
    if mode != "run":
        fail(("search", "method"), f"frontier runs each deployment's ladder of concurrencies: "
                                   f"expected mode: run, got {mode}")
    for key in axes:
        if any(key == s or key.startswith(s + ".") or s.startswith(key + ".")
               for s in SET_BY_SEARCH):
            fail(("axes", key), f"set by search.method frontier (each deployment's layout, "
                                f"MTP, batching and load: {', '.join(SET_BY_SEARCH)}); an "
                                f"axis may set the device and its deployment's precision, "
                                f"stack and micro-batches")


def _pd_ratio(mode: str, axes, fail) -> None:
    if mode != "capacity":
        fail(("search", "method"), f"pd_ratio balances the pools' capacities: expected "
                                   f"mode: capacity, got mode: {mode}")
    for key in INSTANCES:
        if key in axes:
            fail(("axes", key), "set by search.method pd_ratio (the instance counts near "
                                "the balance): not an axis beside it")


def _planned(axes, zips, search: dict, where: Optional[str], fail) -> None:
    """The grid counted before it is expanded (an optuna or random search draws from it,
    never expanding it beyond MAX_POINTS): at most MAX_POINTS combinations, or P/D ratio
    searches."""
    method = search.get("method", "grid")
    if method == "optuna":
        return
    combinations = count(axes, zips)
    if method == "random":
        names = compile_where(where, axes, not_a_key).names if where else frozenset()
        if combinations > MAX_POINTS and not names <= set(axes):
            fail(("where",), f"{shown(where)}: a random search over more than "
                             f"{MAX_POINTS:,} points ({_many(combinations)}) draws them "
                             f"unexpanded, filtered by axes alone, not "
                             f"{', '.join(sorted(names - set(axes)))}")
        return
    if method == "pd_ratio":
        searches = combinations * (2 + min(2 * search["near"] + 1, search["most"]))
        if searches > MAX_POINTS:
            fail(("search", "near"), f"the search plans {_many(searches)} capacity searches "
                                     f"({combinations:,} points x (2 pools + the instance "
                                     f"counts searched)), more than a sweep plans "
                                     f"({MAX_POINTS:,}): narrow the axes, near or most")
        return
    if combinations > MAX_POINTS:
        sizes = " x ".join(str(len(axes[g[0]])) for g in dimensions(axes, zips))
        fail(("axes",), f"the grid holds {_many(combinations)} points "
                        f"({shown(sizes, quote=False)}), more than a sweep plans "
                        f"({MAX_POINTS:,}): narrow the axes, or let "
                        f"`search: {{method: random, n: N}}` or an optuna search draw from them")


def _many(n: int) -> str:
    return f"{n:,}" if n < 10**15 else f"about 10^{len(str(n)) - 1}"


def _where(where, axes, method: str, fail) -> Optional[str]:
    if where is None:
        return None
    if not isinstance(where, str):
        fail(("where",), f"expected an expression as text, got {shown(where)}")
    try:
        names = compile_where(where, axes, not_a_key).names
    except WhereError as e:
        fail(("where",), f"{shown(where)}: {e}")
    if method == "optuna" and not names <= set(axes):
        fail(("where",), f"{shown(where)}: an optuna search filters its draws by axes alone, "
                         f"not {', '.join(sorted(names - set(axes)))}")
    return where


def _name(data, path: Path, fail) -> str:
    name = data.get("name", path.stem)
    if not isinstance(name, str):  # `name: on` is true, `name: 12` a number
        fail(("name",), f"expected a folder name, a string, got {shown(name)} (YAML reads "
                        f"it as a {type(name).__name__}: quote it, name: \"...\")")
    if not name or "/" in name or name in (".", ".."):
        fail(("name",), f"expected a folder name, got {shown(name)}")
    return name


def _base(data, path: Path, fail) -> Path:
    base = data.get("base")
    if not isinstance(base, str) or not base:
        fail(("base",), f"expected the base workload's path (relative to {path.parent}), "
                        f"got {base!r}")
    return (path.parent / base).resolve()


def _ray(data, fail) -> Optional[str]:
    if "ray" not in data:
        return None
    ray = data["ray"]
    if not isinstance(ray, dict) or set(ray) != {"address"}:
        fail(("ray",), f"expected a mapping with one key, address, got {ray!r}")
    address = ray["address"]
    if not isinstance(address, str) or not address:
        fail(("ray", "address"), f"expected a Ray cluster's address (host:port), got "
                                 f"{address!r}")
    return address


def _prices(data, fail) -> Dict[str, float]:
    prices = data.get("prices", {})
    if not isinstance(prices, dict):
        fail(("prices",), f"expected a mapping of devices to dollars per device-hour "
                          f"(\"modeled:B200\": 5.5), got {prices!r}")
    for device, price in prices.items():
        if not (isinstance(device, str) and device):
            fail(("prices",), f"expected a device as `device` names it, got {device!r}")
        if isinstance(price, bool) or not isinstance(price, (int, float)) \
                or not 0 < price < float("inf"):
            fail(("prices", device), f"expected dollars per device-hour, a number > 0, got "
                                     f"{price!r}")
    return {device: float(price) for device, price in prices.items()}


def _choice(data, key: str, choices, fail) -> str:
    value = data.get(key, choices[0])
    if value not in choices:
        fail((key,), f"expected one of {', '.join(choices)}, got {value!r}")
    return value


def _axes(axes, fail) -> Dict[str, Tuple[Any, ...]]:
    if not isinstance(axes, dict) or not axes:
        fail(("axes",), f"expected a mapping of workload keys to lists of values, got {axes!r}")
    for key, values in axes.items():
        reason = not_a_key(str(key))
        if reason:
            fail(("axes", key), reason)
        if not isinstance(values, list) or not values:
            fail(("axes", key), f"expected a non-empty list of values, got {values!r}")
    return {str(k): tuple(v) for k, v in axes.items()}


def check_prices(sweep: SweepFile, devices: Collection[str]) -> None:
    """SweepError for a price of a device none of `devices`, those the sweep's points run
    on: a misspelt device's price would be silently ignored."""
    for device in sweep.prices:
        if device not in devices:
            raise SweepError(f"{sweep.at(('prices', device))}: no point of the sweep runs on "
                             f"{device}: expected a device its points use "
                             f"({', '.join(sorted(map(str, devices)))})")


def not_a_key(key: str) -> str:
    """Why `key` is not a workload key path an axis may set; "" when it is."""
    if key in PLACED:
        return f"{key} is set by the sweep for each point (--set {key}=DIR moves the sweep)"
    node: Any = SCHEMA
    for depth, part in enumerate(key.split(".")):
        if not isinstance(node, dict) or part not in node:
            where = ".".join(key.split(".")[:depth]) or "a workload"
            return f"not a workload key: {part} is not a key of {where} (docs/workloads.md)"
        node = node[part]
    return ""  # a section's values replace it whole, as --set's do


def _zips(zips, axes, fail) -> Tuple[Tuple[str, ...], ...]:
    if zips is None:
        return ()
    if not (isinstance(zips, list) and all(isinstance(g, list) and g for g in zips)):
        fail(("zip",), f"expected a list of lists of axes, got {zips!r}")
    seen: Dict[str, int] = {}
    for i, group in enumerate(zips):
        for key in group:
            if key not in axes:
                fail(("zip",), f"group {i + 1}: {key!r} is not an axis")
            if key in seen:
                fail(("zip",), f"{key} is in groups {seen[key] + 1} and {i + 1}: an axis "
                               f"moves with one group")
            seen[key] = i
        lengths = {key: len(axes[key]) for key in group}
        if len(set(lengths.values())) > 1:
            fail(("zip",), f"group {i + 1}: axes that move together need as many values "
                           f"each, got {', '.join(f'{k} {n}' for k, n in lengths.items())}")
    return tuple(tuple(g) for g in zips)


def _once(axes, zips, fail) -> None:
    """Each dimension's values given once: an axis's value twice, or a zip group's values
    taken together twice, is one point listed twice (two identical rows). Values are told
    apart as YAML read them (8 and 8.0 are two), the axes of a zip group together (tp: [1, 1]
    beside dp: [1, 2] is two points)."""
    for group in dimensions(axes, zips):
        first: Dict[str, int] = {}
        for i in range(len(axes[group[0]])):
            values = tuple(axes[key][i] for key in group)
            text = json.dumps(values, sort_keys=True, default=repr)
            if text not in first:
                first[text] = i
                continue
            which = f"(values {first[text] + 1} and {i + 1})"
            if len(group) == 1:
                fail(("axes", group[0]), f"{shown(values[0])} is given twice {which}: each "
                                         f"value once, or the point is listed twice")
            together = ", ".join(f"{key}={shown(v)}" for key, v in zip(group, values))
            fail(("zip",), f"group {zips.index(group) + 1}: {shown(together, quote=False)} "
                           f"is given twice {which}: each combination once, or the point "
                           f"is listed twice")


def _search(search, fail) -> dict:
    if search is None:
        return {}
    if not isinstance(search, dict):
        fail(("search",), f"expected a mapping (method: grid), got {search!r}")
    method = search.get("method", "grid")
    if method not in METHODS:
        fail(("search", "method"), f"expected one of {', '.join(METHODS)}, got {method!r}")
    allowed = {"method", *SEARCH_KEYS[method]}
    unknown = sorted(set(search) - allowed)
    if unknown:
        fail(("search", unknown[0]), f"unknown key for method {method}; expected "
                                     f"{', '.join(sorted(allowed))}")
    if method == "grid":
        return dict(method=method)
    if method == "frontier":
        return dict(method=method, frontier=frontier_options(search, fail))
    if method == "pd_ratio":
        near, most = search.get("near", 1), search.get("most", 8)
        for key, value, low, high, what in (
                ("near", near, 0, MAX_NEAR, " (instance counts either side of the balance)"),
                ("most", most, 1, None, " (the most instances of one pool)")):
            _integer(value, low, high, what, ("search", key), fail)
        return dict(method=method, near=near, most=most)
    n, seed = search.get("n"), search.get("seed", 0)
    _integer(n, 1, MAX_POINTS, "", ("search", "n"), fail)
    _integer(seed, 0, None, "", ("search", "seed"), fail)
    if method == "random":
        return dict(method=method, n=n, seed=seed)
    return dict(method=method, n=n, seed=seed, **_objective(search, fail))


def _integer(value, low: int, high: Optional[int], what: str, key: KeyPath, fail) -> None:
    if not (isinstance(value, int) and not isinstance(value, bool) and value >= low):
        fail(key, f"expected an integer >= {low}{what}, got {shown(value)}")
    if high is not None and value > high:
        fail(key, f"expected an integer <= {high:,}{what}, the most a sweep takes, got "
                  f"{_many(value)}")


def _objective(search, fail) -> dict:
    objective, direction = search.get("objective"), search.get("direction", "maximize")
    if objective not in OBJECTIVES:
        fail(("search", "objective"), f"expected a column of the sweep table to optimize, "
                                      f"one of {', '.join(OBJECTIVES)}; got {objective!r}")
    if direction not in DIRECTIONS:
        fail(("search", "direction"), f"expected one of {', '.join(DIRECTIONS)}, got "
                                      f"{direction!r}")
    return dict(objective=objective, direction=direction)
