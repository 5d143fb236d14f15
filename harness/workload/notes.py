"""What is valid but likely not what was meant, said at validation (stderr, and `notes` in
--json) rather than found after a run."""

from __future__ import annotations

from typing import Optional, Tuple

from ..traces.generate import longest
from ..traces.read import TraceResult


def notes(values, read: Optional[TraceResult]) -> Tuple[str, ...]:
    """What is valid but likely not meant, said before the run rather than found after it;
    `read`: the trace file as validation read it (None for a generated trace)."""
    said: Tuple[str, ...] = ()
    if values["gil"] == "both" and values["repeats"] < 5:
        said = (f"repeats: {values['repeats']} runs per arm; a GIL comparison needs at least "
                 f"5 (10 recommended) for an interval and a noise floor (docs/gil.md)",)
    return said + _warmup_notes(values) + _prompt_engine_notes(values) \
        + _position_notes(values, read)


def _position_notes(values, read: Optional[TraceResult]) -> Tuple[str, ...]:
    """A request longer than the model's positions (max_position_embeddings) is one a
    serving engine would refuse; the harness runs it, the model's geometry notwithstanding."""
    from engine.model_config import load_model_config

    positions = load_model_config(values["model"]).max_position_embeddings
    most: Optional[int]
    if read is not None:
        most = int((read.df["prompt_len"] + read.df["max_new_tokens"]).max())
    else:
        g = values["trace"]["generate"]
        prompt, output = (longest(g[name]) for name in ("prompt", "output"))
        most = None if prompt is None or output is None else prompt + output
    if most is None or most <= positions:
        return ()
    return (f"model: the trace's longest request holds {most:,} tokens (prompt and output), "
            f"more than the model's max_position_embeddings ({positions:,}): a serving engine "
            f"would refuse it; this replay runs it",)


def _prompt_engine_notes(values) -> Tuple[str, ...]:
    """A prompt engine hands each sequence off at its first token: it never decodes."""
    engine = values["engine"]
    if engine["engine_type"] != "prompt":
        return ()
    notes: Tuple[str, ...] = ()
    if engine["num_mtp"]:
        notes += (f"engine.num_mtp: {engine['num_mtp']} on a prompt engine, which never "
                  f"decodes: no draft is proposed or accepted (mtp_acceptance does not "
                  f"apply); only the MTP module's pass over each prompt runs, counted in "
                  f"executed FLOPs",)
    if engine["overlap"]:
        notes += ("engine.overlap: true on a prompt engine, which never decodes and reserves "
                  "no lookahead: overlap only post-processes each step one step later (a "
                  "handed-off sequence frees its blocks a step later)",)
    return notes


def _warmup_notes(values) -> Tuple[str, ...]:
    trace, warmup = values["trace"], values["warmup_steps"]
    g = trace["generate"] or {}
    known = [n for n in (trace["limit"], None if g.get("sessions") else g.get("requests"))
             if n is not None]
    if warmup and known and warmup >= min(known):
        return (f"warmup_steps: {warmup} steps of warm-up for {min(known)} requests: warm-up "
                f"counts steps, and every request first scheduled in one is left out of the "
                f"summary; if none is left, every latency and throughput statistic is NaN",)
    return ()
