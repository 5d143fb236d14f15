"""A workload's sessions (docs/workloads.md, "Sessions"): a session trace file (a format
of harness/traces/session_readers.py, or `auto` telling one) or generator
(`trace.generate.sessions`), and `load.mode: sessions`; replayed in this process, by
either loop, into one co-located engine or a P/D deployment's, its turns enqueued from the
engines' loop or by the frontend's thread, or sent to a `target` endpoint by the client."""

from __future__ import annotations

from pathlib import Path

from fileio.regular import NotAFile, check_regular

from ..traces.session_readers import SESSION_FORMATS, session_format


def replays_sessions(values) -> bool:
    """Whether these (checked) workload values replay a session trace."""
    g = values["trace"]["generate"]
    return values["trace"]["format"] in SESSION_FORMATS or bool(g and g.get("sessions"))


def sessions(values, data, path: Path, fail) -> None:
    """trace.format resolved to sessions where `auto` reads a session file; the sessions
    section null where the generator leaves it out; load.mode: sessions and what a session
    replay cannot take refused by key; frontend.mode inline unless the workload asks for
    the thread."""
    trace, load = values["trace"], values["load"]
    given = (data.get("trace") or {}).get("generate") or {}
    if "sessions" not in given:
        trace["generate"]["sessions"] = None
    elif "requests" in given or (given.get("shared_prefix") or {}).get("groups") is not None:
        fail(("trace", "generate", "requests" if "requests" in given else "shared_prefix"),
             "generated sessions count sessions and chain their own prefixes: expected "
             "trace.generate.sessions alone")
    if trace["file"] and trace["format"] == "auto":
        try:
            trace["format"] = session_format(check_regular(path.parent / trace["file"])) \
                or "auto"
        except (NotAFile, OSError):
            pass  # refused by derived(), as any trace file
    on = trace["format"] in SESSION_FORMATS or "sessions" in given
    if load["mode"] != "sessions" and load["sessions"] is not None:
        fail(("load", "sessions"), f"only load.mode: sessions takes it, and load.mode is "
                                   f"{load['mode']}")
    if load["mode"] == "sessions" and load["sessions"] is None:
        fail(("load", "sessions"), "load.mode: sessions needs the sessions live at a time: "
                                   "expected an integer >= 1")
    if load["mode"] == "sessions" and not on:
        fail(("load", "mode"), "load.mode: sessions replays a session trace: expected "
                               "trace.format: " + ", ".join(SESSION_FORMATS) + " or "
                               "trace.generate.sessions")
    if not on:
        return
    refused = (
        (("load", "mode"), load["mode"] == "concurrency",
         "a session trace's closed loop counts sessions: expected load.mode: sessions"),
        (("trace", "drop_bad_rows"), trace["drop_bad_rows"],
         "a dropped turn would break its session: expected false"),
        (("deployment", "prefill"), bool((data.get("deployment") or {}).get("prefill"))
         and ":" not in values["device"],  # a torch device's: engine processes
         "sessions are replayed into engines in this process: expected a P/D deployment on "
         "a modeled device"))
    for key, bad, why in refused:
        if bad:
            fail(key, why)
    if values["frontend"]["mode"] is None:  # a session replay's turns: the engine's loop's
        values["frontend"]["mode"] = "inline"
