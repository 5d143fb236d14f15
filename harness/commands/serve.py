"""steptrace serve W.yaml: the workload's engine behind an OpenAI-compatible HTTP endpoint
until Ctrl-C or SIGTERM, recorded as a run (docs/serving.md)."""

from __future__ import annotations

import sys

from ..errors import BadInput
from ..io.interrupt import Stop, signals_stop
from .common import add_json, add_set, print_json

DEFAULT_PORT = 8000
DEFAULT_MAX_CONCURRENCY = 256
DEFAULT_MAX_REQUESTS = 100_000


def add(p) -> None:
    p.add_argument("workload")
    p.add_argument("--host", default="127.0.0.1",
                   help="the address to listen on (default 127.0.0.1: this host only)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT,
                   help=f"the port (default {DEFAULT_PORT}; 0: any free one, said on stderr)")
    p.add_argument("--max-concurrency", type=int, default=DEFAULT_MAX_CONCURRENCY,
                   help=f"requests in flight at most; more are refused with 429 (default "
                        f"{DEFAULT_MAX_CONCURRENCY})")
    p.add_argument("--max-requests", type=int, default=DEFAULT_MAX_REQUESTS,
                   help=f"requests the run takes at most (its requests table's rows); more "
                        f"are refused with 503 (default {DEFAULT_MAX_REQUESTS:,})")
    add_set(p, "engine.max_num_seqs=64")
    add_json(p)
    p.set_defaults(handler=main)


def main(args) -> int:
    """0 once a signal stopped the server and its run was written."""
    if not 0 <= args.port <= 65535:
        raise BadInput(f"--port: expected 0 to 65535, got {args.port}")
    for name in ("max_concurrency", "max_requests"):
        if getattr(args, name) < 1:
            raise BadInput(f"--{name.replace('_', '-')}: expected at least 1, got "
                           f"{getattr(args, name)}")
    from ..record.table_writer import start_early
    start_early()
    from ..serve.session import serve
    from . import show
    from .validate import load
    workload = load(args)
    stop = Stop()
    with signals_stop(stop):
        run = serve(workload, args.host, args.port, args.max_concurrency, args.max_requests,
                    _listening, stop)
    if args.json:
        print_json(dict(run=run.result(), signal=stop.signal_name))
    else:
        show.print_text(run.result())
    return 0


def _listening(server) -> None:
    print(f"steptrace serve: {server.model} at {server.url}/v1 (Ctrl-C or SIGTERM stops it "
          f"and writes the run)", file=sys.stderr, flush=True)
