"""The HTTP side of `steptrace serve`: aiohttp on an asyncio loop in a thread of its own.
Each request checked (protocol.py) becomes a Pending, put on `incoming` for the engine's
thread (loop.py); the engine's thread sends each step's events back with deliver(), and
the loop hands each Pending its tokens (a stream writes them as they come).

Limits (docs/serving.md, "Limits"): the body's size, the requests in flight (429 beyond),
the requests of the whole run (the recorder's capacity: 503 beyond), and none once the
server stops (503). Nothing of a request is logged: aiohttp's access log is off."""

from __future__ import annotations

import asyncio
import json
import queue
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

from aiohttp import web

from .metrics import Metrics
from .protocol import ApiError, Completion, Reply, parse

MAX_BODY_BYTES = 4 << 20
SHUTDOWN_S = 5.0  # the longest a stop waits for the responses in progress
Event = Tuple[int, Optional[Tuple[str, str]], float]  # (new tokens, end, commit time)


class Pending:
    """A request between the two threads: what it asks, and its events (the event loop's)."""

    def __init__(self, request: Completion) -> None:
        self.request = request
        self.events: asyncio.Queue = asyncio.Queue()


class Server:
    def __init__(self, host: str, port: int, model: str, vocab_size: int,
                 max_concurrency: int, max_requests: int) -> None:
        self.host, self.port, self.model, self.vocab_size = host, port, model, vocab_size
        self.max_concurrency, self.max_requests = max_concurrency, max_requests
        self.incoming: queue.SimpleQueue = queue.SimpleQueue()  # Pending, to the engine
        self.metrics = Metrics(model)
        self.received = 0  # requests put on `incoming`: the engine numbers them so
        self._in_flight = 0
        self._stopping = False
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="serve-http",
                                        daemon=True)
        self._runner: Optional[web.AppRunner] = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host  # IPv6
        return f"http://{host}:{self.port}"

    def start(self) -> None:
        """Bound and serving once it returns; OSError where the address cannot be bound."""
        self._thread.start()
        try:
            self.port = asyncio.run_coroutine_threadsafe(self._open(), self._loop).result()
        except BaseException:
            self.close()
            raise

    def deliver(self, events: List[Tuple[Pending, Event]], step: Optional[tuple]) -> None:
        """A step's events and figures, from the engine's thread."""
        self._loop.call_soon_threadsafe(self._dispatch, events, step)

    def refuse(self) -> None:
        """From now on no request is put on `incoming` (503, once stopping)."""
        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(self._refuse(), self._loop).result(SHUTDOWN_S)

    def close(self) -> None:
        """Stop taking requests, end the responses in progress (SHUTDOWN_S at most) and the
        thread. Idempotent."""
        if not self._thread.is_alive():
            return
        if self._runner is not None:
            done = asyncio.run_coroutine_threadsafe(self._shut(), self._loop)
            done.result(SHUTDOWN_S + 5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    async def _open(self) -> int:
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        app.add_routes([web.post("/v1/completions", self._completions),
                        web.post("/v1/chat/completions", self._chat),
                        web.get("/v1/models", self._models), web.get("/health", self._health),
                        web.get("/metrics", self._metrics)])
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False,
                                     shutdown_timeout=SHUTDOWN_S)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        return site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def _refuse(self) -> None:
        self._stopping = True

    async def _shut(self) -> None:
        self._stopping = True
        assert self._runner is not None
        await self._runner.cleanup()

    def _dispatch(self, events: List[Tuple[Pending, Event]], step: Optional[tuple]) -> None:
        if step is not None:
            self.metrics.step(*step)
        counters = self.metrics.counters
        for pending, event in events:
            pending.events.put_nowait(event)
            new, end, _ = event
            counters["generation_tokens"] += new
            if end is not None and end[0] == "finished":
                counters["request_success"] += 1
                counters["prompt_tokens"] += pending.request.prompt_len
            elif end is not None and end[0] == "rejected":
                counters["request_rejected"] += 1

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response(dict(object="list", data=[dict(
            id=self.model, object="model", created=0, owned_by="steptrace")]))

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(status=503 if self._stopping else 200)

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(text=self.metrics.text(), content_type="text/plain",
                            headers={"X-Content-Type-Options": "nosniff"})

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, chat=False)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, chat=True)

    async def _serve(self, request: web.Request, chat: bool) -> web.StreamResponse:
        try:
            pending = Pending(await self._admit(request, chat))
        except ApiError as e:
            return _error(e)
        self._in_flight += 1
        self.received += 1
        self.incoming.put(pending)
        try:
            if pending.request.stream:
                return await self._stream(request, pending)
            return await self._whole(pending)
        finally:
            self._in_flight -= 1

    async def _admit(self, request: web.Request, chat: bool) -> Completion:
        """The request checked, against the limits too. From its body read on, nothing
        awaits until it is put on `incoming`: a stop (`_stopping`) is seen here or finds
        it there."""
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise ApiError(413, f"the body is over {MAX_BODY_BYTES} bytes") from None
        if self._stopping:
            raise ApiError(503, "the server is stopping", "service_unavailable")
        completion = parse(body, chat, self.model, self.vocab_size)
        if self._in_flight >= self.max_concurrency:
            raise ApiError(429, f"{self.max_concurrency} requests are in flight, the most "
                                f"this server takes (--max-concurrency): retry later",
                           "rate_limit_error")
        if self.received >= self.max_requests:
            raise ApiError(503, f"this server has taken its {self.max_requests} requests "
                                f"(--max-requests): start it again for more",
                           "service_unavailable")
        return completion

    async def _whole(self, pending: Pending) -> web.Response:
        tokens = 0
        while True:
            new, end, _ = await pending.events.get()
            tokens += new
            if end is not None:
                break
        refused = _refused(end)
        if refused is not None:
            return _error(refused)
        return web.json_response(Reply(pending.request).whole(tokens))

    async def _stream(self, request: web.Request, pending: Pending) -> web.StreamResponse:
        reply, tokens = Reply(pending.request), 0
        new, end, committed = await pending.events.get()
        refused = _refused(end)
        if refused is not None:  # before the first token: an error, not a stream
            return _error(refused)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                               "Cache-Control": "no-cache"})
        await response.prepare(request)
        first = True
        try:
            while True:
                refused = _refused(end)
                if refused is not None:  # the server stopped: said as vLLM says it
                    await _send(response, refused.body())
                elif new or end is not None:
                    tokens += new
                    await _send(response, reply.chunk(new, end is not None, first))
                    if new:
                        self.metrics.delivery_seconds.observe(time.perf_counter() - committed)
                    first = False
                if end is not None:
                    break
                new, end, committed = await pending.events.get()
            if pending.request.include_usage and refused is None:
                await _send(response, reply.usage_chunk(tokens))
            await response.write(b"data: [DONE]\n\n")
        except ConnectionError:  # the client left: the engine still finishes the request
            return response
        await response.write_eof()
        return response


def _refused(end: Optional[Tuple[str, str]]) -> Optional[ApiError]:
    """The error of a request the engine ended without finishing it; None for one finished
    or not ended."""
    if end is None:
        return None
    status, reason = end
    if status == "rejected":
        return ApiError(400, f"the engine rejected the request: {reason}")
    if status != "finished":
        return ApiError(503, f"the request did not finish: {reason}", "service_unavailable")
    return None


async def _send(response: web.StreamResponse, chunk: Dict[str, Any]) -> None:
    await response.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")


def _error(e: ApiError) -> web.Response:
    return web.json_response(e.body(), status=e.status)
