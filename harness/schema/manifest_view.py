"""A run's manifest.json, typed: an attribute per key harness/schema/manifest.py declares,
None where the manifest lacks it. Generated from the declaration by `python -m
harness.schema.manifest`; tests/test_manifest.py checks it is current."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional


@dataclass(frozen=True)
class Manifest:
    workload: Optional[str] = None
    workload_sha256: Optional[str] = None
    trace: Optional[str] = None
    trace_sha256: Optional[str] = None
    trace_rows: Optional[int] = None
    trace_dropped: Optional[Dict[str, Any]] = None
    values: Optional[Dict[str, Any]] = None
    gil_mode: Optional[str] = None
    repeat: Optional[int] = None
    switch_interval_s: Optional[float] = None
    git_sha: Optional[str] = None
    git_date: Optional[str] = None
    versions: Optional[Dict[str, Any]] = None
    host_cpu: Optional[str] = None
    host_cpus: Optional[int] = None
    device: Optional[Dict[str, Any]] = None
    executor: Optional[str] = None
    executor_kind: Optional[str] = None
    profile: Optional[str] = None
    modeled: Optional[bool] = None
    modeled_device: Optional[str] = None
    device_profile: Optional[Dict[str, Any]] = None
    step_model: Optional[Dict[str, Any]] = None
    kv_pool: Optional[Dict[str, Any]] = None
    started: Optional[str] = None
    complete: Optional[bool] = None
    pid: Optional[int] = None
    host: Optional[str] = None
    block: Optional[int] = None
    order: Optional[int] = None
    calibration: Optional[Dict[str, Any]] = None
    interrupted: Optional[bool] = None
    ended: Optional[str] = None
    host_share: Optional[Dict[str, Any]] = None
    telemetry: Optional[Dict[str, Any]] = None
    pools: Optional[Dict[str, Any]] = None
    ranks: Optional[List[Any]] = None
    served: Optional[Dict[str, Any]] = None
    target: Optional[Dict[str, Any]] = None
    error: Optional[str] = None
    killed: Optional[Dict[str, Any]] = None
