"""The served text's rule (docs/serving.md, "Text"): the engine has random weights and no
vocabulary, so text is counted, not read. A prompt's text is one token per word (a run of
characters between whitespace), the word's id a hash of it, so equal text is equal ids
(and prefix caching sees it); each output token is the word OUTPUT_WORD with a space
before it, so the same rule counts a completion's text back to its completion_tokens."""

from __future__ import annotations

import hashlib
from typing import Any, List

OUTPUT_WORD = "tok"


def word_ids(text: str, vocab_size: int) -> List[int]:
    """A prompt's text as token ids: a word (whitespace-separated) a token, its id the
    word's hash modulo the vocabulary."""
    return [int.from_bytes(hashlib.blake2b(word.encode("utf-8", "surrogatepass"),
                                           digest_size=8).digest(), "little") % vocab_size
            for word in text.split()]  # JSON allows a lone surrogate: hashed as it came


def output_text(tokens: int) -> str:
    """The text of `tokens` output tokens."""
    return f" {OUTPUT_WORD}" * tokens


def chat_prompt(messages: List[Any]) -> str:
    """Chat messages as one prompt: a line per message, `ROLE: CONTENT` (already checked
    by protocol.py: a role and a text content each)."""
    return "\n".join(f"{m['role']}: {m['content']}" for m in messages)
