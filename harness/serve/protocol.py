"""OpenAI's completions and chat completions as served (docs/serving.md): a request's body
checked into a Completion, or an ApiError in OpenAI's error shape; the responses' and the
stream's chunks as OpenAI writes them."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from . import text

DEFAULT_MAX_TOKENS = 16  # OpenAI's default for completions, taken for chat too
FINISH_REASON = "length"  # the engine has no end-of-sequence token: every request ends so
NUMBER = (int, float)
# Fields a client may send that the engine does not use: checked for their type only.
IGNORED = {"temperature": NUMBER, "top_p": NUMBER, "top_k": int, "seed": int,
           "presence_penalty": NUMBER, "frequency_penalty": NUMBER, "user": str,
           "stop": (str, list), "min_tokens": int, "echo": bool}


class ApiError(Exception):
    """A request refused: its HTTP status and OpenAI's error object."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error",
                 param: Optional[str] = None) -> None:
        super().__init__(message)
        self.status, self.message, self.kind, self.param = status, message, kind, param

    def body(self) -> Dict[str, Any]:
        return dict(error=dict(message=self.message, type=self.kind, param=self.param,
                               code=self.status))


@dataclass(frozen=True)
class Completion:
    """A request as the engine takes it."""

    chat: bool
    model: str
    prompt_len: int
    prompt_ids: List[int]  # a text prompt's: text.py's word ids
    max_tokens: int
    stream: bool
    include_usage: bool


def parse(body: bytes, chat: bool, model: str, vocab_size: int) -> Completion:
    """The request `body`, checked; `model` is the one served."""
    try:
        request = json.loads(body)
    except (ValueError, UnicodeDecodeError) as e:
        raise ApiError(400, f"the body is not JSON: {e}") from None
    if not isinstance(request, dict):
        raise ApiError(400, "the body must be a JSON object")
    for name, kinds in IGNORED.items():
        _typed(request, name, kinds)
    asked = _typed(request, "model", str)
    if asked is not None and asked != model:
        raise ApiError(404, f"the model {json.dumps(asked)} does not exist: this server "
                            f"serves {json.dumps(model)}", "not_found_error", "model")
    if _typed(request, "n", int) not in (None, 1):
        raise ApiError(400, "n: one choice per request is served", param="n")
    stream = bool(_typed(request, "stream", bool))
    options = _typed(request, "stream_options", dict) or {}
    include_usage = bool(_typed(options, "include_usage", bool, "stream_options."))
    _typed(request, "ignore_eos", bool)  # the engine never stops early: always ignored
    max_tokens = _typed(request, "max_tokens", int)
    if chat:
        max_tokens = _typed(request, "max_completion_tokens", int) or max_tokens
    max_tokens = DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens
    if max_tokens < 1:
        raise ApiError(400, f"max_tokens must be at least 1, got {max_tokens}",
                       param="max_tokens")
    ids = None if chat else _prompt_ids(request.get("prompt"), vocab_size)
    if chat:
        ids = text.word_ids(text.chat_prompt(_messages(request.get("messages"))), vocab_size)
    elif ids is None:
        ids = text.word_ids(_prompt_text(request.get("prompt")), vocab_size)
    if not ids:
        raise ApiError(400, "the prompt is empty: it needs a token (docs/serving.md, "
                            "\"Text\")", param="messages" if chat else "prompt")
    return Completion(chat, model, len(ids), ids, max_tokens, stream, include_usage)


def _typed(request: dict, name: str, kinds, prefix: str = ""):
    """request[name], None where absent or null; an ApiError where of another type (a bool
    is not a number)."""
    value = request.get(name)
    if value is None:
        return None
    kinds = kinds if isinstance(kinds, tuple) else (kinds,)
    if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
        names = " or ".join(_JSON_KIND[k] for k in kinds)
        raise ApiError(400, f"{prefix}{name} must be {names}, got {type(value).__name__}",
                       param=prefix + name)
    return value


_JSON_KIND = {int: "an integer", float: "a number", str: "a string", bool: "a boolean",
              dict: "an object", list: "an array"}


def _prompt_ids(prompt: Any, vocab_size: int) -> Optional[List[int]]:
    """A prompt of token ids (a list of them, or a list of one such list) as a list; None
    for a text prompt."""
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], list):
        prompt = prompt[0]
    if not isinstance(prompt, list) or not prompt or isinstance(prompt[0], str):
        return None
    if not all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < vocab_size
               for t in prompt):
        raise ApiError(400, f"prompt: token ids must be integers in [0, {vocab_size})",
                       param="prompt")
    return prompt


def _prompt_text(prompt: Any) -> str:
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        return prompt[0]
    if isinstance(prompt, list) and len(prompt) > 1:
        raise ApiError(400, "prompt: one prompt per request is served", param="prompt")
    if not isinstance(prompt, str):
        raise ApiError(400, "prompt must be a string or a list of token ids",
                       param="prompt")
    return prompt


def _messages(messages: Any) -> List[Dict[str, str]]:
    """Chat messages, each's content as text (a list of text parts joined)."""
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "messages must be a non-empty array", param="messages")
    out = []
    for i, m in enumerate(messages):
        role = m.get("role") if isinstance(m, dict) else None
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, list):
            if not all(isinstance(p, dict) and p.get("type") == "text"
                       and isinstance(p.get("text"), str) for p in content):
                raise ApiError(400, f"messages[{i}].content: only text parts are served",
                               param="messages")
            content = " ".join(p["text"] for p in content)
        if not isinstance(role, str) or not isinstance(content, (str, type(None))):
            raise ApiError(400, f"messages[{i}] must have a string role and text content",
                           param="messages")
        out.append(dict(role=role, content=content or ""))
    return out


class Reply:
    """The responses to one Completion: its id, its creation time, its shapes."""

    def __init__(self, request: Completion) -> None:
        self.request = request
        self.id = ("chatcmpl-" if request.chat else "cmpl-") + uuid.uuid4().hex
        self.created = int(time.time())
        self.object = "chat.completion" if request.chat else "text_completion"

    def usage(self, completion_tokens: int) -> Dict[str, int]:
        prompt = self.request.prompt_len
        return dict(prompt_tokens=prompt, completion_tokens=completion_tokens,
                    total_tokens=prompt + completion_tokens)

    def whole(self, tokens: int) -> Dict[str, Any]:
        """The non-streaming response."""
        content = text.output_text(tokens)
        choice: Dict[str, Any] = dict(index=0, logprobs=None, finish_reason=FINISH_REASON)
        if self.request.chat:
            choice["message"] = dict(role="assistant", content=content)
        else:
            choice["text"] = content
        return dict(id=self.id, object=self.object, created=self.created,
                    model=self.request.model, choices=[choice], usage=self.usage(tokens))

    def chunk(self, tokens: int, finished: bool, first: bool = False) -> Dict[str, Any]:
        """A stream's chunk of `tokens` new tokens (the last one `finished`); a chat's
        `first` chunk says the role."""
        content = text.output_text(tokens)
        choice: Dict[str, Any] = dict(index=0, logprobs=None,
                                      finish_reason=FINISH_REASON if finished else None)
        if self.request.chat:
            choice["delta"] = dict(role="assistant", content=content) if first \
                else dict(content=content)
        else:
            choice["text"] = content
        chunk = self._chunk([choice])
        if self.request.include_usage:
            chunk["usage"] = None
        return chunk

    def usage_chunk(self, tokens: int) -> Dict[str, Any]:
        """The stream's last chunk with `stream_options: {include_usage: true}`."""
        return {**self._chunk([]), "usage": self.usage(tokens)}

    def _chunk(self, choices: List[Dict[str, Any]]) -> Dict[str, Any]:
        kind = "chat.completion.chunk" if self.request.chat else "text_completion"
        return dict(id=self.id, object=kind, created=self.created, model=self.request.model,
                    choices=choices)
