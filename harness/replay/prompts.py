"""The prompts a run against an endpoint sends (client.py, client_sessions.py): token ids
below VOCAB, or for chat a word per token."""

from __future__ import annotations

from typing import Dict, List, Optional

import numpy as np

VOCAB = 256  # prompt token ids are below it: any model's vocabulary holds them
WORDS = ("the", "of", "and", "to", "in", "is", "it", "that", "for", "on", "as", "with",
         "was", "at", "by", "be")  # a chat prompt's words, one token each in common tokenizers


def prompt_ids(seed: int, i: int, prompt_len: int, hash_ids,
               hash_block_size: Optional[int]) -> List[int]:
    """Request i's prompt of prompt_len token ids below VOCAB: each hash id's block the
    same tokens in every request that names it (a shared prefix shared), the rest the
    request's own."""
    parts = []
    if hash_ids is not None and hash_block_size:
        for h in hash_ids:
            parts.append(np.random.default_rng([seed, 1, int(h)]).integers(
                0, VOCAB, hash_block_size))
    have = sum(len(p) for p in parts)
    if have < prompt_len:
        parts.append(np.random.default_rng([seed, 0, i]).integers(0, VOCAB, prompt_len - have))
    return np.concatenate(parts)[:prompt_len].tolist()


def user_message(ids: List[int]) -> Dict[str, str]:
    """A chat message of these prompt tokens: a word each."""
    return dict(role="user", content=" ".join(WORDS[t % len(WORDS)] for t in ids))


def output_ids(seed: int, turn: int, tokens: int) -> List[int]:
    """The ids standing for a session turn's received output in its children's prompts
    (the same for all of them)."""
    return np.random.default_rng([seed, 2, turn]).integers(0, VOCAB, tokens).tolist()
