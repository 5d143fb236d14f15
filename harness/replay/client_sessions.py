"""A session trace sent to an endpoint (client.py; docs/serving.md, "Sessions"): each turn
sent when what it waits for has ended plus its gap (sessions.py's Turns, on the client's
clock: a parent ends when its stream does), its prompt its parent's prompt as sent, the
output the parent received and its own new input.

A completions prompt is token ids: the parent's, then one id per output token it received
(the same ids for all its children: an endpoint streams text, not the ids it sampled, so
its prefix cache can hold the parent's prompt and the siblings' shared context, not the
parent's own output), then the turn's own. A chat prompt is the conversation, as vLLM's
multi-turn benchmark sends it: the parent's messages, an assistant message of the text it
received, a user message of the new input. A root's prompt is a plain request's.

A turn whose request failed (an HTTP error, a timeout, a stream cut short) ends when it
failed, as a turn the engine rejects ends in a local run: its session goes on, its
children's prompts holding what output it had received.
"""

from __future__ import annotations

import asyncio
from typing import Any, Dict, List, NamedTuple, Tuple

from .prompts import output_ids, prompt_ids, user_message
from .sessions import Turns


class Context(NamedTuple):
    """What a turn's children's prompts begin with: its prompt (ids, or messages) and its
    length in tokens, the output it received and that output's tokens."""

    prompt: list
    length: int
    output: str
    output_tokens: int


class SessionSender:
    """A session trace's turns in flight, through a sender (client.py's _Sender)."""

    def __init__(self, sender, spin_s: float) -> None:
        self.sender, self.spin_s = sender, spin_s
        r = sender.requests
        self.turns = Turns(r.sessions, r.arrival_s)
        self.chat = sender.loop.target.api == "chat"
        self.prompt_len, self.max_new_tokens = r.prompt_len.tolist(), r.max_new_tokens.tolist()
        tree = self.turns.tree
        # the children whose prompts begin with a turn's context (none: prompts recorded)
        self.children = [0 if r.sessions.recorded else len(s) + (c >= 0)
                         for s, c in zip(tree.subagents, tree.next)]
        self.context: Dict[int, Context] = {}  # a turn's, until its children are sent

    async def run(self) -> None:
        flying = self.sender.flying
        self._schedule()
        try:
            while flying:
                done, _ = await asyncio.wait(set(flying), return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    task.result()
        except asyncio.CancelledError:
            for task in flying:
                task.cancel()
            raise

    def _schedule(self) -> None:
        """Every turn now due at a known time, a task that sends it then."""
        for t, i in self.turns.due(float("inf")):
            task = asyncio.ensure_future(self._turn(i, t))
            self.sender.flying.add(task)
            task.add_done_callback(self.sender.flying.discard)

    async def _turn(self, i: int, due: float) -> None:
        sender = self.sender
        wait = due - sender.now() - self.spin_s
        if wait > 0:
            await asyncio.sleep(wait)
        while sender.now() < due:
            await asyncio.sleep(0)
        sender.recorder.arrived(i, due)
        prompt, length = self._prompt(i)
        sender.recorder.prompted(i, length)
        stream = await sender.one(i, sender.loop.request(prompt, self.max_new_tokens[i]))
        if self.children[i]:
            self.context[i] = Context(prompt, length, "".join(stream.text), stream.tokens())
        self.turns.ended(i, sender.now())
        self._schedule()

    def _prompt(self, i: int) -> Tuple[List[Any], int]:
        """Turn i's prompt (ids, or messages) and its length in tokens."""
        sender, p = self.sender, self.turns.tree.parent[i]
        loop, r = sender.loop, sender.requests
        if p < 0 or r.sessions.recorded:  # the prompt as the trace has it: its own blocks
            ids = prompt_ids(loop.seed, i, self.prompt_len[i],
                             None if r.hash_ids is None else r.hash_ids[i], r.hash_block_size)
            return (ids if not self.chat else [user_message(ids)]), self.prompt_len[i]
        parent = self.context[p]
        self.children[p] -= 1
        if not self.children[p]:
            del self.context[p]
        new = self.prompt_len[i] - self.prompt_len[p] - self.max_new_tokens[p]  # its input
        ids = prompt_ids(loop.seed, i, new, None, None)
        length = parent.length + parent.output_tokens + new
        if not self.chat:
            return parent.prompt + output_ids(loop.seed, p, parent.output_tokens) + ids, length
        answer = [dict(role="assistant", content=parent.output)] if parent.output else []
        return parent.prompt + answer + [user_message(ids)], length
