"""What the serve tests share: a small modeled workload, a server of it in this process
(stopped, its port freed, when the block ends), a client of urllib's, and a run of
steptrace's own client (a workload's `target`) with the bounds it keeps against the server."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, List, Tuple

from harness.commands import main
from harness.record.run import Run

SERVED = """trace:
  generate: {requests: 1, rate: 1, prompt: {uniform: [4, 8]}, output: {uniform: [1, 2]}}
engine: {max_num_batched_tokens: 512, num_kv_blocks: 256, block_size: 16}
model: tiny
device: modeled:H200
calibration_requests: 0
telemetry: {enabled: false}
"""
MAX_TOKENS_HELD = 4096 - 8  # blocks x block size, less a prompt: fits, long enough to hold
ONE_TOKEN_EVENTS = SERVED + "mtp_acceptance: 0\n"  # a step commits one token: one event each
# A request's TTFT against the server is the served one's plus the network and the two
# event loops between: at most this more (1.5 to 10 ms measured on a shared 2-core
# host), never less
TTFT_SLACK_S = 0.1
# Its mean inter-token gap (TPOT) is the served one's within this, either way
TPOT_SLACK_S = 0.02


def words(text: str) -> int:
    """Tokens of served text: a token a word (docs/serving.md, "Text")."""
    return len(text.split())


def workload_file(root: Path, text: str = SERVED) -> Path:
    path = Path(root) / "served.yaml"
    path.write_text(text + f"output: {Path(root) / 'results'}\nname: served\n")
    return path


@contextmanager
def served(root: Path, max_concurrency: int = 64, max_requests: int = 1000,
           text: str = SERVED):
    """A server of the workload `text` on a free port of 127.0.0.1, in a thread of this
    process; yields (its url, a list the run is put in once the block has stopped it)."""
    from harness.io.interrupt import Stop
    from harness.serve.session import serve
    from harness.workload import load_workload

    workload = load_workload(str(workload_file(root, text)), ())
    stop, listening, result = Stop(), threading.Event(), []
    url: List[str] = []

    def listen(server):
        url.append(server.url)
        listening.set()

    def run():
        try:
            result.append(serve(workload, "127.0.0.1", 0, max_concurrency, max_requests,
                                listen, stop))
        finally:
            listening.set()
    thread = threading.Thread(target=run, name="test-serve")
    thread.start()
    try:
        assert listening.wait(60) and url, "the server did not start"
        run_written: List[Any] = []
        yield url[0], run_written
    finally:
        stop.request()
        thread.join(60)
        assert not thread.is_alive(), "the server did not stop"
    run_written.extend(result)


def client_run(tmp_path: Path, target: str, body: str, name: str = "client") -> Run:
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"{body}target: {target}\ntelemetry: {{enabled: false}}\n"
                    f"calibration_requests: 0\noutput: {tmp_path / 'results'}\nname: {name}\n")
    assert main(["run", str(path)]) == 0
    return Run.read(next((tmp_path / "results" / name).iterdir()))


def post(url: str, path: str, body: Any, raw: bool = False) -> Tuple[int, bytes]:
    """(status, body) of a POST of `body` (JSON, or bytes as they are with `raw`)."""
    data = body if raw else json.dumps(body).encode()
    request = urllib.request.Request(url + path, data=data,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def get(url: str, path: str) -> Tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url + path, timeout=60) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def events(body: bytes) -> List[Any]:
    """A server-sent event stream's data, each parsed; `[DONE]` as the string."""
    out = []
    for block in body.decode().split("\n\n"):
        if not block.strip():
            continue
        assert block.startswith("data: "), block
        data = block[len("data: "):]
        out.append(data if data == "[DONE]" else json.loads(data))
    return out


def error_of(status_body: Tuple[int, bytes]) -> Dict[str, Any]:
    """OpenAI's error object of a response, checked to be in its shape."""
    status, body = status_body
    error = json.loads(body)["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["code"] == status
    return error


@contextmanager
def aiohttp_endpoint(routes):
    """An aiohttp application of `routes` on a free port of 127.0.0.1, on an event loop in
    a thread of this process; yields its url."""
    import asyncio

    from aiohttp import web

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    app = web.Application()
    app.add_routes(routes)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)

    async def start():
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        return site._server.sockets[0].getsockname()[1]

    port = asyncio.run_coroutine_threadsafe(start(), loop).result(10)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


def endpoint_with_metrics(status: int, text: str):
    """aiohttp routes of an endpoint: /metrics answering `status` with `text`, and
    /v1/completions streaming 4 events and [DONE]."""
    from aiohttp import web

    async def metrics(request):
        return web.Response(status=status, text=text)

    async def completions(request):
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        chunk = {"choices": [{"index": 0, "text": " tok"}]}
        for _ in range(4):
            await response.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        return response

    return [web.get("/metrics", metrics), web.post("/v1/completions", completions)]
