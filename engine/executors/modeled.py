"""The modeled executor: no forward. A step lasts what a roofline of its FLOPs and bytes
on a device profile says, so a run needs no such device:

    step = overhead + max(executed_flops / (peak * compute_eff), bytes / (hbm_bw * memory_eff))

DP ranks run side by side on their own devices: the step lasts as long as the slowest rank.
With a deployment (engine/deployment.py) each rank's step is timed part by part on one of
its devices, with the routed experts of every rank's tokens and the communication between
them (the C++ DeploymentModel; docs/modeling.md). Accepted MTP drafts come from the seeded
acceptance model. Everything it reports is labelled modeled.
"""

from __future__ import annotations

from typing import Final

import numpy as np

from .. import _core
from ..config import EngineConfig
from ..deployment import BYTES, Deployment
from ..devices import DeviceProfile, detect_device
from ..flops import FlopsEstimator
from ..plan import KIND_DECODE, BatchContract
from .base import ExecutorOutput
from .spec import Built

PRECISION_BYTES = BYTES


def build(config: EngineConfig, spec, model_config) -> Built:
    """The profile's roofline, on the host. Without a deployment: weights at the run's
    precision, BF16 KV; with one, each part at its own."""
    d = config.deployment
    if d is None:
        flops = FlopsEstimator(model_config, kv_bytes=2.0,
                               weight_bytes=PRECISION_BYTES[config.precision])
    else:
        flops = FlopsEstimator(model_config, weight_bytes=BYTES[d.precision["dense"]],
                               expert_weight_bytes=BYTES[d.precision["experts"]],
                               kv_bytes=BYTES[d.precision["kv"]])
    profile = spec.device_profile()
    return Built(ModeledExecutor(config, flops, profile), flops, detect_device("cpu"), profile)


def deployment_rates(d: Deployment, profile: DeviceProfile, model_config) -> _core.DeploymentRates:
    """The C++ step model's inputs: degrees, payloads, and each part's effective rate."""
    r = _core.DeploymentRates()
    r.devices, r.attention_tp, r.dense_tp = d.devices, d.attention_tp, d.dense_tp
    r.moe_ep, r.moe_tp, r.micro_batches = d.moe_ep, d.moe_tp, d.micro_batches
    r.scaleup_devices = int(profile.scaleup_devices.value)
    r.local_experts = (model_config.n_routed_experts + d.redundant_experts) / d.moe_ep
    r.expert_imbalance = d.expert_imbalance
    r.hidden = model_config.hidden_size
    r.dispatch_bytes, r.combine_bytes = BYTES[d.precision["dispatch"]], BYTES[d.precision["combine"]]
    r.layers = model_config.num_hidden_layers
    compute = profile.compute_efficiency.value * 1e12
    r.attention_flops_per_s = profile.peak(d.precision["attention"]) * compute
    r.dense_flops_per_s = profile.peak(d.precision["dense"]) * compute
    r.expert_flops_per_s = profile.peak(d.precision["experts"]) * compute
    r.hbm_bytes_per_s = profile.figure("hbm_tb_s") * 1e12 * profile.memory_efficiency.value
    network = profile.network_efficiency.value * 1e9
    scaleup = profile.figure("interconnect_gb_s") / 2  # one direction
    r.scaleup_bytes_per_s = scaleup * network
    out = profile.scaleout_gb_s  # None: Deployment.check keeps the deployment in one domain
    r.scaleout_bytes_per_s = (out.value if out else scaleup) * network
    r.scaleup_latency_s = profile.scaleup_latency_us.value * 1e-6
    r.scaleout_latency_s = profile.scaleout_latency_us.value * 1e-6
    r.overhead_s = profile.step_overhead_us.value * 1e-6
    r.layer_floor_s = layer_floor_s(profile)
    return r


def layer_floor_s(profile: DeviceProfile) -> float:
    """The least time one layer of a busy rank takes (docs/modeling.md, "The latency
    floor"); 0 where the profile gives none."""
    floor = profile.layer_floor_us
    return floor.value * 1e-6 if floor is not None else 0.0


class ModeledExecutor:
    holds_requests: Final = False  # only lengths matter to a roofline: no tokens, no KV

    def __init__(self, config: EngineConfig, estimator: FlopsEstimator,
                 profile: DeviceProfile) -> None:
        if config.scheduler.num_mtp and config.mtp_acceptance is None:
            raise ValueError("the modeled executor has no model to verify MTP drafts with: "
                             "set mtp_acceptance")
        self.profile = profile
        self.cost = estimator.cost_model()
        self.flops_per_s = profile.peak(config.precision) * 1e12 * profile.compute_efficiency.value
        self.bytes_per_s = profile.figure("hbm_tb_s") * 1e12 * profile.memory_efficiency.value
        self.overhead_s = profile.step_overhead_us.value * 1e-6
        self.floor_s = estimator.cfg.num_hidden_layers * layer_floor_s(profile)
        self.mtp = config.scheduler.num_mtp > 0
        self.acceptance = config.mtp_acceptance
        self._rng = np.random.default_rng(config.seed)
        self.deployment = None if config.deployment is None else _core.DeploymentModel(
            self.cost, deployment_rates(config.deployment, profile, estimator.cfg))

    def execute(self, plan: _core.Plan) -> ExecutorOutput:  # the C++ cost model reads it
        accepted = [self._accept(b) for b in plan.batches] if self.mtp else None
        if self.deployment is not None:
            seconds, costs = self.deployment.step(plan, accepted, self.mtp)
            return ExecutorOutput(accepted=accepted, forward_ns=int(round(seconds * 1e9)),
                                  sample_ns=0, modeled=True, flops=costs)
        if self.mtp:
            assert accepted is not None  # drawn above whenever mtp
            flops = [self.cost.batch(b, a, True) for b, a in zip(plan.batches, accepted)]
        else:
            flops = self.cost.plan(plan)
        # ranks run side by side: the step lasts as long as the slowest
        flops = [_core.StepCost(c.model_flops, c.executed_flops, c.bytes,
                                self.roofline(c.executed_flops, c.bytes)) for c in flops]
        slowest = max(c.rank_s for c in flops)
        seconds = self.overhead_s + slowest if slowest else 0.0  # idle ranks move no byte
        return ExecutorOutput(accepted=accepted, forward_ns=int(round(seconds * 1e9)),
                              sample_ns=0, modeled=True, flops=flops)

    def step_seconds(self, executed_flops: float, nbytes: float) -> float:
        return self.overhead_s + self.roofline(executed_flops, nbytes)

    def roofline(self, executed_flops: float, nbytes: float) -> float:
        """A rank's own step without the overhead, at least its layers' floor; 0 for a rank
        that moves no byte."""
        if not nbytes:
            return 0.0
        return max(executed_flops / self.flops_per_s, nbytes / self.bytes_per_s, self.floor_s)

    def _accept(self, batch: BatchContract) -> np.ndarray:
        """Leading drafts accepted, each with probability `acceptance`."""
        drafts = np.where(batch.kind == KIND_DECODE, batch.seqlen_q.astype(np.int64) - 1, 0)
        if not drafts.any():
            return np.zeros(len(drafts), dtype=np.int64)
        assert self.acceptance is not None, "drafts are verified only with mtp_acceptance set"
        hits = self._rng.random((len(drafts), int(drafts.max()))) < self.acceptance
        leading = np.cumprod(hits, axis=1).sum(axis=1)
        return np.minimum(leading, drafts).astype(np.int64)
