"""The endpoint's /metrics scraped while a run against it sends its requests (the client
loop's, harness/replay/client.py): a GET every `target.metrics_interval_s` on the client's
event loop (the first as the run starts, one more once its requests have ended), each
sample a row of the server table, taken on the run's clock when its response was read.

A scrape that fails (an HTTP error such as 404 from a server without /metrics, text not in
Prometheus' format, no connection, no answer within TIMEOUT_S or the interval, whichever
is longer) ends the scraping: the
rows so far are kept, and the manifest's `target.metrics.stopped` says why. The run goes
on either way.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Dict, Optional
from urllib.parse import urlsplit

import aiohttp

from ..record.prometheus import Malformed, samples

REASON_CHARS = 200
TIMEOUT_S = 5.0  # a scrape's shortest timeout: a busy server answers late, not never


def metrics_url(endpoint: str) -> str:
    """`<endpoint>/metrics`, at the server's root where the endpoint ends in `/v1`."""
    base = endpoint.rstrip("/")
    if urlsplit(base).path.endswith("/v1"):
        base = base[:-len("/v1")]
    return base + "/metrics"


class Scraper:
    """One run's scrapes of `url`, every `interval_s`; `said` is the manifest's account."""

    def __init__(self, endpoint: str, interval_s: float, recorder, start: float) -> None:
        self.url, self.interval_s = metrics_url(endpoint), interval_s
        self.recorder, self.start = recorder, start
        self.said: Dict[str, Any] = dict(url=self.url, interval_s=interval_s, scrapes=0,
                                         samples=0)
        self.stopped: Optional[str] = None

    async def every(self, session) -> None:
        """Scrapes until cancelled or one fails, each `interval_s` after the last began."""
        while self.stopped is None:
            began = time.perf_counter()
            await self.once(session)
            await asyncio.sleep(max(0.0, self.interval_s - (time.perf_counter() - began)))

    async def once(self, session) -> None:
        """One scrape, its samples recorded; a failure stops the scraping, saying why."""
        if self.stopped is not None:
            return
        try:
            text = await self._get(session)
            found = samples(text)
        except (aiohttp.ClientError, asyncio.TimeoutError, Malformed, UnicodeError) as e:
            return self._stop(_reason(e))
        except _HTTPError as e:
            return self._stop(str(e))
        self.recorder.scraped(time.perf_counter() - self.start, found)
        self.said["scrapes"] += 1
        self.said["samples"] += len(found)

    async def _get(self, session) -> str:
        timeout = aiohttp.ClientTimeout(total=max(TIMEOUT_S, self.interval_s))
        async with session.get(self.url, timeout=timeout, allow_redirects=False) as response:
            if response.status != 200:
                body = (await response.content.read(REASON_CHARS)).decode("utf-8", "replace")
                raise _HTTPError(f"HTTP {response.status}: {body.strip()}"[:REASON_CHARS])
            return (await response.read()).decode("utf-8")

    def _stop(self, reason: str) -> None:
        self.stopped = self.said["stopped"] = reason


class _HTTPError(Exception):
    pass


def _reason(error: BaseException) -> str:
    if isinstance(error, asyncio.TimeoutError):
        return f"no answer within {TIMEOUT_S:g} s or target.metrics_interval_s"
    if isinstance(error, Malformed):
        return f"not Prometheus' text format: {error}"[:REASON_CHARS]
    return f"{type(error).__name__}: {error}"[:REASON_CHARS]
