"""The C++ replay loops (csrc/replay/): a modeled run on the virtual clock, one instance
(virtual_replay.hpp) or a P/D deployment's (pd_replay.hpp), replayed without a Python frame
per step. Python starts them, takes each full chunk of rows (the recorder's flush) and
reports progress between steps; the GIL is released otherwise.

They mirror the Python loops (harness/replay/driver.py, harness/replay/disaggregated.py),
which replay everything else: the real clock, the GIL's A/B arms (docs/architecture.md,
"Two replay loops"). Both replay the same requests through the same schedulers, step
models (engine._core.ModeledStep) and step logs, so their tables are equal for a seed but
for the host timings.
"""

from __future__ import annotations

import threading
from typing import Callable, Optional

import numpy as np

from engine import _core
from engine.device_memory import kv_bytes_per_token
from engine.disaggregation import Disaggregation

from . import driver
from .driver import Requests


def replay_native(engine, requests: Requests, recorder,
                  on_step: Optional[Callable[[int, int], None]] = None,
                  stop: Optional[threading.Event] = None) -> bool:
    """driver.replay on the virtual clock, for an LLMEngine on the modeled executor, in C++;
    True if completed. `stop` is looked at every driver.PROGRESS_EVERY steps."""
    stop = threading.Event() if stop is None else stop
    completed = _core.replay_virtual(
        engine.scheduler, engine.executor.core, recorder.log, **_requests(requests, recorder),
        overlap=engine.config.scheduler.overlap, progress_every=driver.PROGRESS_EVERY,
        on_progress=_progress(on_step, stop))
    return completed and not stop.is_set()


def replay_disaggregated_native(service: Disaggregation, instances, requests: Requests,
                                model_config, recorder,
                                on_step: Optional[Callable[[int, int], None]] = None,
                                stop: Optional[threading.Event] = None) -> bool:
    """disaggregated.replay_disaggregated in C++; True if completed. `instances`: its
    Instance list (prefill instances first), their step logs the recorder's."""
    stop = threading.Event() if stop is None else stop
    completed = _core.replay_disaggregated(
        [(i.role, i.index, i.engine.scheduler, i.engine.executor.core, i.log)
         for i in instances], **_requests(requests, recorder),
        service=_service(service, instances, model_config), progress_every=driver.PROGRESS_EVERY,
        on_progress=_progress(on_step, stop))
    return completed and not stop.is_set()


def _service(service: Disaggregation, instances, model_config) -> _core.PdService:
    """What the C++ P/D loop needs of the deployment: its routers and its KV's transfer,
    as the Python loop reads them (disaggregated.py, _Service)."""
    prefill = next(i.engine for i in instances if i.role == "prefill")
    decode = next(i.engine for i in instances if i.role == "decode")
    p, d, kv = service.prefill, service.decode, service.kv_transfer
    s = _core.PdService()
    s.prefill_router, s.decode_router = service.prefill_router, service.decode_router
    scheduler = prefill.config.scheduler
    s.capacity_blocks = scheduler.dp_size * scheduler.num_kv_blocks
    s.block_size = scheduler.block_size
    s.kv_bytes_per_token = float(kv_bytes_per_token(model_config, p.deployment))
    s.layers = model_config.num_hidden_layers + model_config.num_nextn_predict_layers
    s.sender_bps = kv.bytes_per_s(prefill.device_profile) * p.deployment.attention_tp
    s.receiver_bps = kv.bytes_per_s(decode.device_profile) * d.deployment.attention_tp
    s.latency_s, s.layerwise = kv.latency_us * 1e-6, kv.layerwise
    return s


def _progress(on_step, stop: threading.Event) -> Callable[[int, int], bool]:
    def progress(done: int, n: int) -> bool:
        if on_step is not None:
            on_step(done, n)
        return not stop.is_set()
    return progress


def _requests(requests: Requests, recorder) -> dict:
    """The loops' request arguments: the trace's columns, its hash ids flat, a closed
    loop's window, a session trace's tree, and where a closed loop's releases or a session
    trace's arrivals are written (the recorder's arrivals)."""
    offsets, ids = _hash_rows(requests.hash_ids)
    s = requests.sessions
    arrivals = bool(requests.concurrency) or s is not None
    return dict(arrival_s=requests.arrival_s, prompt_len=requests.prompt_len,
                max_new_tokens=requests.max_new_tokens, hash_offsets=offsets, hash_ids=ids,
                hash_block_size=requests.hash_block_size or 0,
                concurrency=requests.concurrency or 0,
                released_s=recorder.arrival_s if arrivals else None,
                sessions=None if s is None else (s.parent, s.gap_s, s.subagent, s.session_id,
                                                 s.live))


def _hash_rows(hash_ids):
    """Each request's hash ids as one flat array and its offsets (request i's are
    ids[offsets[i]:offsets[i + 1]]); (None, None) without any."""
    if hash_ids is None:
        return None, None
    lengths = np.fromiter((0 if h is None else len(h) for h in hash_ids), np.int64,
                          len(hash_ids))
    offsets = np.zeros(len(hash_ids) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    parts = [np.asarray(h, np.int64) for h in hash_ids if h is not None and len(h)]
    return offsets, np.concatenate(parts) if parts else np.zeros(0, np.int64)
