"""A generated trace's shared prefixes, for prefix-cache studies (SGLang's
generated-shared-prefix benchmark): every request belongs to one of `groups` groups, drawn
at random, and its prompt is its group's prefix of `tokens` tokens followed by its own
tokens (the generator's prompt length). Hash ids name the prompt's blocks of the engine's
`block_size`: a group's full prefix blocks share their ids across the group; every other
block, the one the prefix ends in included, is the request's own."""

from __future__ import annotations

import numpy as np
import pandas as pd

OWN = 1 << 62  # ids of blocks no other request holds, counted up from here


def shared_prefix(df: pd.DataFrame, groups: int, tokens: int, block_size: int,
                  seed: int) -> pd.DataFrame:
    """`df` (arrival_s, prompt_len, max_new_tokens) with prefixes added: prompt_len grows by
    `tokens`, and hash_ids (attrs["hash_block_size"] = block_size) say what is shared."""
    group = np.random.default_rng([seed, groups]).integers(groups, size=len(df))
    prompt = df["prompt_len"].to_numpy(np.int64) + tokens
    shared = tokens // block_size
    blocks = -(-prompt // block_size)
    own = np.cumsum(blocks - shared) - (blocks - shared) + OWN  # each request's first own id
    ids = [[int(g) << 32 | k for k in range(shared)] + list(range(int(o), int(o + n - shared)))
           for g, o, n in zip(group, own, blocks)]
    out = df.assign(prompt_len=prompt, hash_ids=pd.Series(ids, index=df.index, dtype=object))
    out.attrs["hash_block_size"] = block_size
    return out
