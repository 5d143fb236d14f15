"""Prometheus' text format (version 0.0.4) read into samples, and the engine figures that
vLLM and SGLang name differently under one name of steptrace's (docs/serving.md, "As a
client"): the server table's `metric`."""

from __future__ import annotations

import re
from typing import List, Tuple

# a server's metric name -> steptrace's, where servers name one figure differently
NAMES = {
    "vllm:num_requests_running": "running",
    "sglang:num_running_reqs": "running",
    "vllm:num_requests_waiting": "waiting",
    "sglang:num_queue_reqs": "waiting",
    "vllm:kv_cache_usage_perc": "kv_cache_usage",
    "vllm:gpu_cache_usage_perc": "kv_cache_usage",  # vLLM's name before 0.10
    "sglang:token_usage": "kv_cache_usage",
    "vllm:generation_tokens_total": "generation_tokens",
    "sglang:generation_tokens_total": "generation_tokens",
}

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_SAMPLE = re.compile(rf"({_NAME})(?:\{{(.*)\}})?[ \t]+(\S+)(?:[ \t]+-?[0-9]+)?[ \t]*")
_LABEL = re.compile(r'[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\]|\\.)*)"[ \t]*(,|$)')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}

Sample = Tuple[str, str, float]  # (name, labels, value)


class Malformed(ValueError):
    """Text not in Prometheus' text format; the message names the line."""


def samples(text: str) -> List[Sample]:
    """Each sample of the exposition `text`: its metric name, its labels (`k="v"` joined by
    commas, sorted by name, as the format escapes values) and its value. Comments and
    blank lines are skipped; anything else not a sample raises Malformed."""
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = _SAMPLE.fullmatch(line.strip())
        if match is None:
            raise Malformed(f"line {number} is not a sample: {line[:80]!r}")
        name, labels, value = match.groups()
        try:
            out.append((name, _labels(labels or ""), float(value)))
        except ValueError:
            raise Malformed(f"line {number} is not a sample: {line[:80]!r}") from None
    return out


def _labels(text: str) -> str:
    pairs, at = [], 0
    while at < len(text):
        match = _LABEL.match(text, at)
        if match is None or match.end() == at:
            raise ValueError(text)
        value = re.sub(r"\\.", lambda m: _UNESCAPE.get(m.group(), m.group()), match.group(2))
        pairs.append((match.group(1), value))
        at = match.end()
    return ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(pairs))


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
