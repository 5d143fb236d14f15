"""The modeled executor: no forward. A step lasts what a roofline of its FLOPs and bytes
on a device profile says, so a run needs no such device:

    step = overhead + max(executed_flops / (peak * compute_eff), bytes / (hbm_bw * memory_eff))

DP ranks run side by side on their own devices: the step lasts as long as the slowest rank.
Accepted MTP drafts come from the seeded acceptance model. Everything it reports is
labelled modeled.
"""

from __future__ import annotations

import numpy as np

from ..config import EngineConfig
from ..devices import DeviceProfile, detect_device
from ..flops import FlopsEstimator
from ..plan import KIND_DECODE
from .base import ExecutorOutput
from .spec import Built

PRECISION_BYTES = {"bf16": 2.0, "fp8": 1.0, "fp4": 0.5}


def build(config: EngineConfig, spec, model_config) -> Built:
    """The profile's roofline, on the host; weights at the run's precision, BF16 KV."""
    flops = FlopsEstimator(model_config, kv_bytes=2.0,
                           weight_bytes=PRECISION_BYTES[config.precision])
    profile = spec.device_profile()
    return Built(ModeledExecutor(config, flops, profile), flops, detect_device("cpu"), profile)


class ModeledExecutor:
    holds_requests = False  # only lengths matter to a roofline: no tokens, no KV

    def __init__(self, config: EngineConfig, estimator: FlopsEstimator,
                 profile: DeviceProfile) -> None:
        if config.scheduler.num_mtp and config.mtp_acceptance is None:
            raise ValueError("the modeled executor has no model to verify MTP drafts with: "
                             "set mtp_acceptance")
        self.profile = profile
        self.cost = estimator.cost_model()
        self.flops_per_s = profile.peak(config.precision) * 1e12 * profile.compute_efficiency.value
        self.bytes_per_s = profile.hbm_tb_s.value * 1e12 * profile.memory_efficiency.value
        self.overhead_s = profile.step_overhead_us.value * 1e-6
        self.mtp = config.scheduler.num_mtp > 0
        self.acceptance = config.mtp_acceptance
        self._rng = np.random.default_rng(config.seed)

    def execute(self, plan) -> ExecutorOutput:
        if self.mtp:
            batches = plan.batches
            accepted = [self._accept(b) for b in batches]
            flops = [self.cost.batch(b, a, True) for b, a in zip(batches, accepted)]
        else:
            accepted = None
            flops = self.cost.plan(plan)
        seconds = 0.0  # ranks run side by side: the step lasts as long as the slowest
        for cost in flops:
            if cost.bytes:  # an empty rank moves no byte and idles
                seconds = max(seconds, self.step_seconds(cost.executed_flops, cost.bytes))
        return ExecutorOutput(accepted=accepted, forward_ns=int(round(seconds * 1e9)),
                              sample_ns=0, modeled=True, flops=flops)

    def step_seconds(self, executed_flops: float, nbytes: float) -> float:
        return self.overhead_s + max(executed_flops / self.flops_per_s,
                                     nbytes / self.bytes_per_s)

    def _accept(self, batch) -> np.ndarray:
        """Leading drafts accepted, each with probability `acceptance`."""
        drafts = np.where(batch.kind == KIND_DECODE, batch.seqlen_q.astype(np.int64) - 1, 0)
        if not drafts.any():
            return np.zeros(len(drafts), dtype=np.int64)
        hits = self._rng.random((len(drafts), int(drafts.max()))) < self.acceptance
        leading = np.cumprod(hits, axis=1).sum(axis=1)
        return np.minimum(leading, drafts).astype(np.int64)
