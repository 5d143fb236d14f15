"""The session trace formats, each read as the same checked session frame (docs/workloads.md,
"Sessions"): steptrace's own (sessions.py), Mooncake's traces with sessions derived from
their hash ids (mooncake_sessions.py) and WEKA's agentic coding traces (weka_sessions.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from .mooncake_sessions import read_mooncake_sessions
from .read import TraceResult
from .sessions import looks_like_sessions, read_session_trace
from .weka_sessions import looks_like_weka, read_weka

SESSION_FORMATS = ("sessions", "mooncake_sessions", "weka")


def session_format(path: Path) -> Optional[str]:
    """The session format a file's beginning shows unambiguously (sessions or weka), else
    None (mooncake_sessions reads a request trace's file: it is named, never told)."""
    if looks_like_sessions(path):
        return "sessions"
    return "weka" if looks_like_weka(path) else None


def read_session_file(path, fmt: str, hash_block_size: Optional[int] = None,
                      chain_block: Optional[int] = None, time_unit: str = "auto") -> TraceResult:
    """A session trace of format `fmt` (one of SESSION_FORMATS). hash_block_size: the
    file's tokens per hash id, where given (default: Mooncake's 512 or Bailian's 16, a WEKA
    file's own block_size); chain_block: the block of the chained ids a "sessions" file
    without hash ids is given."""
    if fmt == "mooncake_sessions":
        return read_mooncake_sessions(path, hash_block_size, time_unit)
    if fmt == "weka":
        return read_weka(path, hash_block_size)
    return read_session_trace(path, hash_block_size or chain_block)
