"""A `deployment:` on a torch device (cpu, cuda, npu, auto): its devices are engine
processes, one DP attention rank each (harness/ranks/processes.py), or a P/D deployment's
instances, a process each (harness/ranks/pd_replay.py). What the real engine does
not run yet is refused by key; so are more devices than the host has, a process-group
backend the torch build lacks and a rendezvous (MASTER_ADDR, MASTER_PORT) torch cannot
use. docs/workloads.md, "A deployment on a real device"."""

from __future__ import annotations

import importlib.util
import os
from typing import Optional, Tuple

# keys a real device's deployment takes; any other given is the modeled engine's alone
REAL_KEYS = ("devices", "attention", "moe", "memory_utilization", "micro_batches",
             "redundant_experts", "precision")
CPU_RANKS_PER_CORE = 4  # on the CPU the ranks are processes: more than this per core thrash
MAX_PORT = 65_535


def check(values, data, fail) -> None:
    """The deployment's keys a real device honours, checked: its `devices` are the engine
    processes (1: the engine in the harness's process)."""
    section = values["deployment"]
    _layout(values, section, data.get("deployment") or {}, ("deployment",), fail)
    if section["devices"] > 1:
        _processes(values, data, section["devices"], fail)


def _layout(values, section, given, key, fail) -> None:
    """One engine's layout over its processes (`section` at `key`: the deployment, or a
    P/D pool's): DP attention on every device, EP over every rank or none, no TP."""
    for name in sorted(set(given) - set(REAL_KEYS)):
        fail(key + (name,), f"modeled devices only: a torch device runs at `dtype` with "
                            f"its own memory; expected the keys {', '.join(REAL_KEYS)}")
    n = section["devices"]
    if section["attention"]["tp"] != 1 or section["moe"]["tp"] != 1:
        part = "attention" if section["attention"]["tp"] != 1 else "moe"
        fail(key + (part, "tp"), "TP on the real engine is not built yet: expected 1")
    dp = section["attention"]["dp"]
    if dp is not None and dp != n:
        fail(key + ("attention", "dp"), f"on a real device every device is a DP attention "
                                        f"rank: expected {n} (devices), got {dp}")
    _expert_parallel(values, section, key, fail)


def _expert_parallel(values, section, key, fail) -> None:
    """EP over every rank (engine/ep.py), its experts placed evenly; two micro-batches
    overlap one's all-to-all with the other's compute, so they need EP."""
    n = section["devices"]
    ep = section["moe"]["ep"] or n
    if ep == 1:
        if section["micro_batches"] > 1:
            fail(key + ("micro_batches",), "two micro-batches overlap one's all-to-all with "
                 "the other's compute: expected moe.ep > 1, or micro_batches: 1")
        return
    import torch

    from engine.deployment import Deployment, DeploymentError
    from engine.ep import check_real
    from engine.model_config import load_model_config

    on_cpu = values["device"] == "cpu" or values["device"] == "auto" and not (
        torch.cuda.is_available() or importlib.util.find_spec("torch_npu"))
    try:  # the payloads' precisions matter off the CPU alone
        check_real(Deployment.from_values(section, values["precision"]),
                   load_model_config(values["model"]), n,
                   torch.device("cpu" if on_cpu else "cuda"))
    except DeploymentError as e:
        fail(key + tuple(e.key), str(e.message))


def check_pd(values, data, fail) -> None:
    """A P/D deployment on a torch device (its pools' engines checked as a modeled one's):
    each instance its devices' processes on the workload's device, laid out as a
    co-located deployment on a real device is; the modeled link refused by key."""
    from engine.disaggregation import ROLES

    section, given = values["deployment"], data.get("deployment") or {}
    for name in sorted(given.get("kv_transfer") or {}):
        fail(("deployment", "kv_transfer", name), "a modeled link's: on a torch device the "
                                                  "KV moves over the process group's "
                                                  "backend (gloo, NCCL, HCCL) in the time "
                                                  "it takes")
    for role in ROLES:
        pool, key = section[role], ("deployment", role)
        if pool["device"] is not None:
            fail(key + ("device",), f"on a torch device both pools run on `device` "
                                    f"({values['device']}): expected it unset")
        layout = {k: v for k, v in given[role].items() if k not in ("instances", "engine")}
        _layout(values, pool, layout, key, fail)
    _processes(values, data, sum(section[role]["instances"] * section[role]["devices"]
                                 for role in ROLES), fail)


def _processes(values, data, n: int, fail) -> None:
    """N engine processes: the host has the devices, torch the backend; what the harness
    cannot yet replay over processes refused."""
    if (data.get("engine") or {}).get("dp_size", 1) != 1:
        fail(("engine", "dp_size"), "with deployment.devices > 1 each device is a process "
                                    "with a DP rank of its own: expected 1")
    if values["clock"] != "real":
        fail(("clock",), "rank processes step on the real clock: expected real")
    if values["load"]["mode"] == "concurrency":
        fail(("load", "mode"), "a closed loop over rank processes is not built yet: "
                               "expected trace or offline")
    if (data.get("frontend") or {}).get("mode") == "thread":
        fail(("frontend", "mode"), "rank processes are fed by the harness's own loop: "
                                   "expected inline")
    values["frontend"]["mode"] = "inline"
    key = ("deployment", "devices") if values["deployment"]["prefill"] is None \
        else ("deployment", "decode", "instances")
    why = host_refusal(values["device"], n)
    if why:
        fail(key, why)
    try:
        rendezvous(os.environ)
    except ValueError as e:
        fail(key, f"{n} rank processes meet at MASTER_ADDR:MASTER_PORT, and {e}")


def rendezvous(environ) -> Tuple[str, Optional[int]]:
    """Where the rank processes' process group meets: MASTER_ADDR (default this host) and
    MASTER_PORT (None: a free port, found when the ranks start); ValueError naming the
    variable set to what torch could not use."""
    addr = environ.get("MASTER_ADDR", "127.0.0.1")
    if not addr.strip():
        raise ValueError("the environment's MASTER_ADDR is empty: expected a host name or "
                         "address, or MASTER_ADDR unset (this host)")
    port = environ.get("MASTER_PORT") or None  # set empty: unset
    if port is None:
        return addr, None
    if not (port.isascii() and port.isdigit() and 1 <= int(port) <= MAX_PORT):
        raise ValueError(f"the environment's MASTER_PORT is {port[:40]!r}: expected a port "
                         f"number in 1..{MAX_PORT}, or MASTER_PORT unset (a free port)")
    return addr, int(port)


def host_refusal(device: str, n: int) -> Optional[str]:
    """Why this host cannot start n ranks on `device`; None when it can."""
    import torch
    import torch.distributed as dist

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else \
            "npu" if importlib.util.find_spec("torch_npu") else "cpu"
    if device == "cuda":
        if not torch.cuda.is_available() or not dist.is_nccl_available():
            return f"{n} devices on cuda need NCCL, and this torch build has " \
                   f"{'no CUDA' if not torch.cuda.is_available() else 'no NCCL'}"
        have = torch.cuda.device_count()
    elif device == "npu":
        if importlib.util.find_spec("torch_npu") is None:
            return f"{n} devices on npu need HCCL, and torch_npu is not installed"
        import torch_npu  # noqa: F401  (registers torch.npu)

        have = torch.npu.device_count()  # type: ignore[attr-defined]
    else:
        if not dist.is_gloo_available():
            return f"{n} processes on the CPU need gloo, and this torch build has none"
        cores = os.cpu_count() or 1
        limit = cores * CPU_RANKS_PER_CORE
        return None if n <= limit else \
            f"{n} rank processes on a host of {cores} cores: expected at most {limit} " \
            f"({CPU_RANKS_PER_CORE} per core)"
    return None if n <= have else f"{n} devices, and this host has {have} {device} devices"
