"""`search: {method: optuna}`: the points drawn by an Optuna study (TPE, seeded) over the
axes' values instead of the whole grid, `--workers` at a time, each point run by the same
execute() and task as a grid's, its objective told to the study. The study is stored in
SQLite beside the sweep (`<output>/<name>/study.db`), so a search resumes: its points
already drawn run again only where incomplete, and it draws until it holds `n`, or until
every point of the space has been drawn (TPE draws a small space's points again and again).
Optuna is an optional extra, imported only here."""

from __future__ import annotations

import json
import math
from concurrent.futures import Executor
from dataclasses import replace
from pathlib import Path
from typing import Any, Dict, List, Optional, Set, Tuple

from fileio.regular import not_regular

from .execute import Progress, SweepPlan, Task, execute
from .expand import count, dimensions, kept
from .point import resolve
from .where import WhereError, compile_where, shown

INSTALL = 'pip install -e ".[optuna]" in a checkout, or pip install "steptrace[optuna]"'
STUDY = "study.db"
DRAWS_PER_POINT = 100  # draws `where` rejects, at most, per point wanted


class SearchError(RuntimeError):
    """Optuna is missing, `where` rejects nearly every draw or fails on one, or the study
    cannot be opened (bad input: exit 2)."""


def import_optuna():
    try:
        import optuna
    except ImportError:
        raise SearchError(f"Optuna is not installed; install the optuna extra: "
                          f"{INSTALL}") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


def search(the_plan: SweepPlan, executor: Executor, task: Task, fresh: bool = False,
           progress: Optional[Progress] = None, batch: int = 1) -> List[Dict]:
    """The rows of the study's points, in the order drawn (each point once); the points
    of an earlier session of the study first, run again where incomplete."""
    optuna = import_optuna()
    study = _study(optuna, the_plan, fresh)
    sweep, total = the_plan.sweep, the_plan.sweep.n or 0
    ended = dict(done=0, skipped=0, failed=0, refused=0)
    states = optuna.trial.TrialState
    for trial in study.trials:
        if trial.state == states.RUNNING:  # its sweep was stopped: the point is incomplete
            study.tell(trial.number, state=states.FAIL)
    drawn_whole = [t for t in study.trials if _whole(t.params, sweep)]
    tried = {_combination(t.params) for t in drawn_whole}  # kept by `where` or not
    earlier = [t for t in drawn_whole if t.state != states.PRUNED]
    rows = _run(the_plan, [_point(the_plan, t.params) for t in earlier], executor, task,
                fresh, _adding(ended, total, progress))
    _settle(ended, rows, total, progress)
    space = count(sweep.axes, sweep.zips)
    while len(rows) < total and len(tried) < space:
        asked = _draw(study, the_plan, min(batch, total - len(rows)), states.PRUNED, tried,
                      space)
        drawn = _run(the_plan, [p for _, p in asked], executor, task, fresh,
                     _adding(ended, total, progress))
        for (trial, _), row in zip(asked, drawn):
            value = row[sweep.objective] if row["status"] == "done" else None
            if value is None or math.isnan(value):
                study.tell(trial, state=states.FAIL)
            else:
                study.tell(trial, value)
        rows += drawn
        _settle(ended, rows, total, progress)
    if not rows:
        raise SearchError(f"{sweep.path}: where: {shown(sweep.where)} rejected every one of "
                          f"the {space:,} points of the axes")
    if len(rows) < total and progress is not None:  # the space ran out before n draws
        progress(dict(ended, left=0, total=len(rows)))
    return _once(rows)


def _draw(study, the_plan: SweepPlan, want: int, pruned, tried: Set[Tuple],
          space: int) -> List[Tuple[Any, Any]]:
    """`want` trials asked of the study and their points, fewer where the draws have met
    every one of the `space` points (`tried`, the combinations drawn, grows); those `where`
    rejects are told pruned (not points of the sweep)."""
    sweep = the_plan.sweep
    where = compile_where(sweep.where, sweep.axes) if sweep.where else None
    asked: List[Tuple[Any, Any]] = []
    for _ in range(DRAWS_PER_POINT * want):
        trial = study.ask()
        try:
            keep = kept([_suggest(trial, sweep)], where)
        except WhereError as e:
            study.tell(trial, state=pruned)
            raise SearchError(f"{sweep.path}: where: {shown(sweep.where)}: {e}") from None
        tried.add(_combination(trial.params))
        if keep:
            asked.append((trial, _point(the_plan, trial.params)))
        else:
            study.tell(trial, state=pruned)
        if len(asked) == want or len(tried) == space:
            return asked
    raise SearchError(f"{sweep.path}: where: {shown(sweep.where)} rejected nearly all of "
                      f"{DRAWS_PER_POINT * want} draws of the study")


def _study(optuna, the_plan: SweepPlan, fresh: bool):
    from sqlalchemy.exc import SQLAlchemyError

    the_plan.folder.mkdir(parents=True, exist_ok=True)
    path = _checked(the_plan.folder / STUDY)
    if fresh and path.exists():
        path.unlink()
    sweep = the_plan.sweep
    space = json.dumps(dict(axes=sweep.axes, zip=sweep.zips, objective=sweep.objective,
                            direction=sweep.direction), default=str)
    changed = SearchError(f"{path}: the study was stored for other axes or another "
                          f"objective: run with --fresh to start it again")
    try:
        study = optuna.create_study(
            study_name=sweep.name, storage=storage_url(path), load_if_exists=True,
            direction=sweep.direction, sampler=optuna.samplers.TPESampler(seed=sweep.seed))
    except ValueError:
        raise changed from None
    # not a database, a damaged one, another program's, or another Optuna version's schema
    except (SQLAlchemyError, optuna.exceptions.StorageInternalError, RuntimeError) as e:
        why = shown(str(getattr(e, "orig", None) or e).split("\n")[0], quote=False)
        raise SearchError(f"{path}: cannot read the search's study there ({why}): run with "
                          f"--fresh to start the search again (it deletes the file)") from None
    if study.user_attrs.get("space", space) != space:  # the indices would mean other values
        raise changed
    study.set_user_attr("space", space)
    return study


def storage_url(path: Path) -> str:
    """The SQLite URL of the file at `path`, whatever its name holds: built from the path,
    so that `?`, `#`, `%20` or `{x}` in it are the file's name, never a query, a fragment,
    an escape or a template (Optuna formats the URL it is given)."""
    from sqlalchemy.engine import URL

    return URL.create("sqlite", database=str(path.absolute())).render_as_string(
        hide_password=False)


def _checked(path: Path) -> Path:
    """The study's path where it is absent or a regular file; SearchError naming what it
    is otherwise (a FIFO would block its opening for ever; a folder or a link is not the
    study this sweep stored, and --fresh deletes only that)."""
    what = "is a symbolic link" if path.is_symlink() else \
        not_regular(path) if path.exists() else None
    if what is not None:
        raise SearchError(f"{path}: the search's study {what}: expected the SQLite file the "
                          f"sweep stores there; move it away")
    return path


def _suggest(trial, sweep) -> Dict:
    """The trial's axis values: one categorical choice per dimension of the grid (an axis,
    or a zip group), of its values' indices, so a value may be any YAML value."""
    for group in dimensions(sweep.axes, sweep.zips):
        trial.suggest_categorical("+".join(group), list(range(len(sweep.axes[group[0]]))))
    return _combo(sweep, trial.params)


def _combo(sweep, params: Dict) -> Dict:
    combo: Dict = {}
    for group in dimensions(sweep.axes, sweep.zips):
        combo.update({key: sweep.axes[key][params["+".join(group)]] for key in group})
    return {key: combo[key] for key in sweep.axes}


def _whole(params: Dict, sweep) -> bool:
    """Whether a trial chose every dimension (a sweep killed between asking a trial and
    its choices leaves one that did not)."""
    return all("+".join(group) in params for group in dimensions(sweep.axes, sweep.zips))


def _combination(params: Dict) -> Tuple:
    return tuple(sorted(params.items()))


def _point(the_plan: SweepPlan, params: Dict):
    return resolve(the_plan.sweep.base, the_plan.sweep.mode, _combo(the_plan.sweep, params),
                   the_plan.sets, the_plan.folder, the_plan.front_by)


def _run(the_plan: SweepPlan, points, executor, task, fresh, progress) -> List[Dict]:
    return execute(replace(the_plan, points=tuple(points)), executor, fresh, progress, task)


def _adding(ended: Dict[str, int], total: int, progress: Optional[Progress]):
    """execute()'s counts of one batch, added to the search's so far."""
    before = dict(ended)

    def update(counts: Dict[str, int]) -> None:
        ended.update({k: before[k] + counts.get(k, 0) for k in before})
        if progress is not None:
            progress(dict(ended, left=max(0, total - sum(ended.values()))))
    return update


def _settle(ended: Dict[str, int], rows: List[Dict], total: int,
            progress: Optional[Progress]) -> None:
    """The counts of every draw so far, exact once a batch has ended: a point drawn again
    counts as skipped, a refused one as refused (execute() counts the points it ran)."""
    seen, before = set(), dict(ended)
    ended.update(done=0, skipped=0, failed=0, refused=0)
    for row in rows:
        again = row["axes"] in seen or row["skipped"]
        seen.add(row["axes"])
        ended["skipped" if again else "done" if row["status"] == "done" else row["status"]] += 1
    if progress is not None and ended != before:
        progress(dict(ended, left=max(0, total - len(rows))))


def _once(rows: List[Dict]) -> List[Dict]:
    """Each point's row once, where first drawn (the study may draw a point again)."""
    seen: Dict[str, Dict] = {}
    for row in rows:
        seen.setdefault(row["axes"], row)
    return list(seen.values())
