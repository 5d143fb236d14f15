"""A `deployment:` on a torch device (cpu, cuda, npu, auto): its devices are engine
processes, one DP attention rank each (harness/replay/ranks.py). What the real engine does
not run yet is refused by key; so are more devices than the host has and a process-group
backend the torch build lacks. docs/workloads.md, "A deployment on a real device"."""

from __future__ import annotations

import importlib.util
import os
from typing import Optional

# keys a real device's deployment takes; any other given is the modeled engine's alone
REAL_KEYS = ("devices", "attention", "moe", "memory_utilization", "micro_batches",
             "redundant_experts", "precision")
CPU_RANKS_PER_CORE = 4  # on the CPU the ranks are processes: more than this per core thrash


def check(values, data, fail) -> None:
    """The deployment's keys a real device honours, checked: its `devices` are the engine
    processes (1: the engine in the harness's process)."""
    section, given = values["deployment"], data.get("deployment") or {}
    for key in sorted(set(given) - set(REAL_KEYS)):
        fail(("deployment", key), f"modeled devices only: a torch device runs at `dtype` with "
                                  f"its own memory; expected the keys {', '.join(REAL_KEYS)}")
    n = section["devices"]
    if section["attention"]["tp"] != 1 or section["moe"]["tp"] != 1:
        key = "attention" if section["attention"]["tp"] != 1 else "moe"
        fail(("deployment", key, "tp"), "TP on the real engine is not built yet: expected 1")
    dp = section["attention"]["dp"]
    if dp is not None and dp != n:
        fail(("deployment", "attention", "dp"), f"on a real device every device is a DP "
                                                f"attention rank: expected {n} (devices), "
                                                f"got {dp}")
    _expert_parallel(values, n, fail)
    if n > 1:
        _processes(values, data, n, fail)


def _expert_parallel(values, n: int, fail) -> None:
    """EP over every rank (engine/ep.py), its experts placed evenly; two micro-batches
    overlap one's all-to-all with the other's compute, so they need EP."""
    section = values["deployment"]
    ep = section["moe"]["ep"] or n
    if ep == 1:
        if section["micro_batches"] > 1:
            fail(("deployment", "micro_batches"), "two micro-batches overlap one's all-to-all "
                 "with the other's compute: expected moe.ep > 1, or micro_batches: 1")
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
        fail(("deployment",) + tuple(e.key), str(e.message))


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
    why = host_refusal(values["device"], n)
    if why:
        fail(("deployment", "devices"), why)


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
