"""The tokens table (workload key `tokens: true`): every output token of every request, as
the engine's Workers kept them (docs/tables.md, tokens)."""

from __future__ import annotations

from typing import Dict, List

import numpy as np
import pandas as pd

from ..schema.tables import TOKENS


def tokens_frame(outputs: Dict[int, List[int]], max_new_tokens: np.ndarray) -> pd.DataFrame:
    """Rows by request_id, then position. A Worker may hold more than a request's
    max_new_tokens (MTP commits accepted drafts past it; the scheduler discards them): those
    are not output."""
    ids = sorted(outputs)
    kept = [outputs[i][:int(max_new_tokens[i])] for i in ids]
    counts = np.array([len(t) for t in kept], dtype=np.int64)
    starts = np.cumsum(counts) - counts
    frame = pd.DataFrame({
        "request_id": np.repeat(np.array(ids, dtype=np.int64), counts),
        "position": np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(starts, counts),
        "token_id": np.array([t for ts in kept for t in ts], dtype=np.int64),
    })
    return frame[list(TOKENS.names)]
