"""What a serving frontend does per output token in plain Python: incremental
detokenization (a byte-level vocabulary, an incremental UTF-8 decoder), a stop-string
check on the new text, and a streamed chunk (a JSON server-sent event). The frontend
thread's default `per_token_us` comes from it:

    python -m tests.bench.detokenize_cost
"""

import codecs
import json
import random
import statistics
import time

VOCAB = 32_000
TOKENS = 100  # per sample: short, so that on a shared host some samples run unpreempted


def vocabulary(seed: int = 0) -> list:
    """Byte strings of 1 to 8 bytes, some of them partial UTF-8 characters."""
    rng = random.Random(seed)
    words = [rng.choice(["", " "]) + "".join(rng.choice("abcdefghijklmnopqrstuvwxyzé漢")
                                             for _ in range(rng.randint(1, 6)))
             for _ in range(VOCAB)]
    return [w.encode()[:rng.randint(1, 8)] for w in words]


def stream(token_ids, vocab, stop=("\n\n", "</s>")) -> int:
    """Every token through the frontend's per-token work; the bytes streamed."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    text, sent = "", 0
    for i, token in enumerate(token_ids):
        piece = decoder.decode(vocab[token])
        text += piece
        if any(s in text[-16:] for s in stop):
            break
        event = json.dumps({"id": "req", "index": i, "delta": {"content": piece}})
        sent += len(f"data: {event}\n\n".encode())
    return sent


def per_token_us(rounds: int = 1000) -> list:
    vocab = vocabulary()
    rng = random.Random(1)
    samples = []
    for _ in range(rounds):
        ids = [rng.randrange(VOCAB) for _ in range(TOKENS)]
        start = time.perf_counter_ns()
        stream(ids, vocab)
        samples.append((time.perf_counter_ns() - start) / TOKENS / 1e3)
    return samples


if __name__ == "__main__":
    samples = per_token_us()
    print(f"per token: median {statistics.median(samples):.2f} us, min {min(samples):.2f} us "
          f"({len(samples)} rounds of {TOKENS} tokens)")
