"""The client loop (loop.py's Loop) of a run against an endpoint, the workload's `target:`:
the trace's requests sent to an OpenAI-compatible server and streamed back, each one's row
filled from its stream (harness/record/client_recorder.py). No engine here: the run writes
no steps or batches tables. Every stream runs on one asyncio event loop in the run's
thread (aiohttp).

Open loop: a pacer sends each request at its arrival time, sleeping to within SPIN_S of it
and yielding to the event loop until it comes, and records when it sent it (enqueue_s)
beside when it was due (arrival_s): latencies count from arrival_s, so a late send is not
hidden (coordinated omission), and the manifest reports the lag. Closed loop
(`load.concurrency`): that many senders, each sending the next request in trace order when
its last one ends; a request arrives when it is released. A session trace's turns are
sent as their parents' streams end (client_sessions.py).

A request that fails is recorded and the run goes on: an HTTP error or a refused
connection is `rejected`, a stream cut short (a timeout, a malformed or error event, no
`[DONE]`) `unfinished` with the tokens it had; the reason says which. A redirect is never
followed. The API key (`target.api_key_env`) is sent, never recorded. The endpoint's
/metrics is scraped on the same event loop (harness/replay/scrape.py).
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple
from urllib.parse import urlsplit

import aiohttp
import numpy as np

from ..errors import BadInput
from ..record.client_recorder import ClientRecorder
from ..record.metrics import describe
from .client_sessions import SessionSender
from .driver import Requests
from .frontend import Frontend
from .prompts import prompt_ids, user_message
from .scrape import Scraper

SPIN_S = 0.002  # the pacer sleeps to within this of a send, then yields until it is due
STOP_POLL_S = 0.05
REASON_CHARS = 200
TABLES = "requests, server (its /metrics) and summary only: the engine is the endpoint's, " \
         "so no steps or batches"


class ClientLoop:
    """The trace's requests sent to `target`'s endpoint."""

    recorder_type: type = ClientRecorder
    uncalibrated: Optional[str] = "off: a run against an endpoint has no engine step to " \
                                  "calibrate"
    frontend: Optional[Frontend] = None  # the client is the frontend
    instances: Sequence[Tuple[str, int, Any]] = ()

    def __init__(self, target, seed: int) -> None:
        self.target, self.seed = target, seed
        self.url = endpoint_url(target.endpoint, target.api)
        self.headers = {"Content-Type": "application/json"}
        if target.api_key_env is not None:
            key = os.environ.get(target.api_key_env)
            if not key:
                raise BadInput(f"target.api_key_env: the environment variable "
                               f"{target.api_key_env} is not set")
            self.headers["Authorization"] = f"Bearer {key}"
        self.sent: Dict[str, Any] = dict(endpoint=target.endpoint, url=self.url,
                                         model=target.model, api=target.api, tables=TABLES)

    def manifest(self) -> Dict[str, Any]:
        # the dict itself: the send lag is filled in once the run has sent its requests
        return dict(target=self.sent)

    def output_tokens(self) -> Dict[int, List[int]]:
        return {}

    def close(self) -> None:
        pass

    def run(self, requests: Requests, recorder, progress, stop: threading.Event,
            start: float) -> bool:
        lags = np.full(len(requests.arrival_s), np.nan)  # NaN: never sent
        complete = asyncio.run(self._replay(requests, recorder, progress, stop, start, lags))
        lag = describe(lags)  # each request's send time less its arrival
        self.sent["send_lag_s"] = {k: float(v) for k, v in lag.items() if k != "count"}
        self.sent["send_lag_s"]["count"] = int(lag["count"])
        return complete

    async def _replay(self, requests: Requests, recorder, progress, stop, start,
                      lags: np.ndarray) -> bool:
        n = len(requests.arrival_s)
        timeout = aiohttp.ClientTimeout(total=self.target.timeout_s)
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout,
                                         headers=self.headers) as session:
            send = _Sender(self, session, requests, recorder, start, progress, n, lags)
            scraper, scraping = self._scraper(session, recorder, start)
            work = asyncio.ensure_future(
                SessionSender(send, SPIN_S).run() if requests.sessions is not None
                else send.closed(requests.concurrency) if requests.concurrency
                else send.open(requests.arrival_s))
            try:
                while not work.done():
                    if stop.is_set():
                        work.cancel()
                    await asyncio.wait([work], timeout=STOP_POLL_S)
            finally:
                if scraping is not None:
                    scraping.cancel()
                    await asyncio.gather(scraping, return_exceptions=True)
            if work.cancelled():
                await asyncio.gather(*send.flying, return_exceptions=True)
                return False
            work.result()
            if scraper is not None:  # the counters as the requests left them
                await scraper.once(session)
        return not stop.is_set()

    def _scraper(self, session, recorder, start: float):
        """(the run's Scraper, its task) of the endpoint's /metrics; (None, None) where
        `target.metrics_interval_s` is null."""
        interval = self.target.metrics_interval_s
        if interval is None:
            self.sent["metrics"] = dict(off="target.metrics_interval_s: null")
            return None, None
        scraper = Scraper(self.target.endpoint, interval, recorder, start)
        self.sent["metrics"] = scraper.said
        return scraper, asyncio.ensure_future(scraper.every(session))

    def body(self, i: int, prompt_len: int, max_new_tokens: int, hash_ids,
             hash_block_size: Optional[int]) -> Dict[str, Any]:
        """Request i's body: its prompt of prompt_len tokens (ids, or words for chat),
        max_new_tokens, no early end, streamed with its usage."""
        ids = prompt_ids(self.seed, i, prompt_len, hash_ids, hash_block_size)
        return self.request(ids if self.target.api != "chat" else [user_message(ids)],
                            max_new_tokens)

    def request(self, prompt: list, max_new_tokens: int) -> Dict[str, Any]:
        """The body of a prompt (token ids, or chat messages), max_new_tokens, no early end,
        streamed with its usage."""
        body: Dict[str, Any] = dict(model=self.target.model, max_tokens=max_new_tokens,
                                    ignore_eos=True, stream=True,
                                    stream_options=dict(include_usage=True))
        body["messages" if self.target.api == "chat" else "prompt"] = prompt
        return body


class _Sender:
    """The requests of one run in flight: each one sent, streamed and recorded."""

    def __init__(self, loop: ClientLoop, session, requests: Requests, recorder, start: float,
                 progress, n: int, lags: np.ndarray) -> None:
        self.loop, self.session, self.requests = loop, session, requests
        self.recorder, self.start, self.progress, self.n = recorder, start, progress, n
        self.lags = lags
        self.flying: set = set()
        self.next = 0

    def now(self) -> float:
        return time.perf_counter() - self.start

    async def open(self, arrivals: np.ndarray) -> None:
        """Each request sent at its arrival time."""
        try:
            for i in range(self.n):
                due = float(arrivals[i])
                wait = due - self.now() - SPIN_S
                if wait > 0:
                    await asyncio.sleep(wait)
                while self.now() < due:
                    await asyncio.sleep(0)
                task = asyncio.ensure_future(self.one(i))
                self.flying.add(task)
                task.add_done_callback(self.flying.discard)
            await asyncio.gather(*self.flying)
        except asyncio.CancelledError:
            for task in self.flying:
                task.cancel()
            raise

    async def closed(self, window: int) -> None:
        """`window` senders, each taking the next request when its last one ends."""
        async def sender():
            while self.next < self.n:
                i, self.next = self.next, self.next + 1
                self.recorder.arrived(i, self.now())
                await self.one(i)

        workers = [asyncio.ensure_future(sender()) for _ in range(min(window, self.n))]
        self.flying.update(workers)
        try:
            await asyncio.gather(*workers)
        except asyncio.CancelledError:
            for task in workers:
                task.cancel()
            raise

    async def one(self, i: int, body: Optional[Dict[str, Any]] = None) -> "_Stream":
        """Request i sent (its trace's body, or `body`), streamed and recorded."""
        r = self.requests
        if body is None:
            body = self.loop.body(i, int(r.prompt_len[i]), int(r.max_new_tokens[i]),
                                  None if r.hash_ids is None else r.hash_ids[i],
                                  r.hash_block_size)
        stream = _Stream()
        sent = self.now()
        self.lags[i] = sent - self.recorder.arrival_s[i]
        try:
            await stream.read(self.session, self.loop.url, body, self.start)
        except asyncio.CancelledError:
            stream.end("unfinished", "the run stopped")
            raise
        finally:
            self.recorder.ended(i, sent, stream.times, stream.tokens(), *stream.outcome)
            if self.progress is not None:
                self.progress(self.recorder.num_done, self.n)
        return stream


class _Stream:
    """One request's response as it streams: its content events' times, its usage, how
    it ended."""

    def __init__(self) -> None:
        self.times: List[float] = []
        self.text: List[str] = []  # the content events' text
        self.usage: Optional[int] = None
        self.outcome: Tuple[str, str] = ("unfinished", "the run stopped")

    def tokens(self) -> int:
        return self.usage if self.usage is not None else len(self.times)

    def end(self, status: str, reason: str) -> None:
        self.outcome = (status, reason[:REASON_CHARS])

    async def read(self, session, url: str, body: dict, start: float) -> None:
        try:
            async with session.post(url, json=body, allow_redirects=False) as response:
                if response.status != 200:
                    text = (await response.content.read(REASON_CHARS)).decode(
                        "utf-8", "replace").strip()
                    where = response.headers.get("Location")
                    said = f"a redirect to {where}, not followed" if where else text
                    self.end("rejected", f"HTTP {response.status}: {said}")
                    return
                await self._events(response, start)
        except asyncio.TimeoutError:
            self.end("unfinished", "timed out (target.timeout_s)")
        except aiohttp.ClientConnectorError as e:
            self.end("rejected", f"cannot connect: {e.os_error.strerror or e}")
        except aiohttp.ClientError as e:
            self.end("unfinished", f"{type(e).__name__}: {e}")

    async def _events(self, response, start: float) -> None:
        data: List[str] = []
        async for raw in response.content:
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            if line:
                if line.startswith("data:"):
                    data.append(line[5:].removeprefix(" "))
                elif not line.startswith((":", "event:", "id:", "retry:")):
                    return self.end("unfinished", f"malformed event: {line!r}")
                continue
            if not data:
                continue
            event, data = "\n".join(data), []
            if event == "[DONE]":
                return self.end("finished", "")
            if not self._event(event, time.perf_counter() - start):
                return
        self.end("unfinished", "the stream ended before [DONE]")

    def _event(self, event: str, t: float) -> bool:
        """One event taken; False (the request ended) where it is malformed or an error."""
        try:
            chunk = json.loads(event)
        except ValueError:
            self.end("unfinished", f"malformed event: {event!r}")
            return False
        if not isinstance(chunk, dict):
            self.end("unfinished", f"malformed event: {event!r}")
            return False
        if "error" in chunk:
            error = chunk["error"]
            message = error.get("message") if isinstance(error, dict) else error
            self.end("unfinished", f"error event: {message}")
            return False
        usage = chunk.get("usage")
        if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
            self.usage = usage["completion_tokens"]
        choices = chunk.get("choices") or []
        text = "".join(_content(c) for c in choices if isinstance(c, dict))
        if text:
            self.times.append(t)
            self.text.append(text)
        return True


def _content(choice: dict) -> str:
    """The output a choice carries: a completion's text or a chat delta's content."""
    delta = choice.get("delta")
    text = choice.get("text") or (isinstance(delta, dict) and delta.get("content"))
    return str(text) if text else ""


def endpoint_url(endpoint: str, api: str) -> str:
    """The API's URL under the endpoint: `/v1/completions` or `/v1/chat/completions`, the
    `/v1` not doubled where the endpoint ends in it."""
    base = endpoint.rstrip("/")
    if not urlsplit(base).path.endswith("/v1"):
        base += "/v1"
    return base + ("/chat/completions" if api == "chat" else "/completions")
