"""The modeled executor: no forward; a step lasts what a roofline of its FLOPs and bytes
on a device profile says, so a run needs no such device:

    step = overhead + max(executed_flops / (peak * compute_eff), bytes / (hbm_bw * memory_eff))

DP ranks run side by side on their own devices: the step lasts as long as the slowest rank.
With a deployment (engine/deployment.py) each rank's step is timed part by part on one of
its devices, with the routed experts of every rank's tokens and the communication between
them (the C++ DeploymentModel; docs/modeling.md). Accepted MTP drafts come from the seeded
acceptance model. A prefill that reloads blocks from the host KV tier (host_kv_blocks) adds
their bytes over the profile's host link to the step. Everything it reports is labelled
modeled.
"""

from __future__ import annotations

from typing import Final

import numpy as np

from .. import _core
from ..config import EngineConfig
from ..deployment import BYTES, ROOFLINE, Deployment
from ..device_memory import kv_bytes_per_token
from ..devices import DeviceProfile, detect_device
from ..devices.profile import Figure
from ..flops import FlopsEstimator
from ..kernels.host import STEP_HOST_US
from ..kernels.load import kernel_table
from ..kernels.roofline import roofline_table
from ..kernels.step import step_terms
from ..kernels.streams import decode_streams
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
    r.dispatch_bytes = BYTES[d.precision["dispatch"]]
    r.combine_bytes = BYTES[d.precision["combine"]]
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


def with_kernel_tables(r: _core.DeploymentRates, d: Deployment, profile: DeviceProfile,
                       model_config, decodes: bool = True) -> dict:
    """`r` timed from the deployment's kernel tables where it has them: their terms, the
    stack's host cost for the profile's overhead, and no layer floor (small shapes'
    measured times carry it). What the step is timed by, as the run's manifest records it
    (`step_model`); how the stack runs a decode step where the engine runs one
    (`decodes`: not a P/D prefill pool's prompt engine)."""
    stack = d.kernel_stack(profile)
    if stack is None and not profile.family_efficiency:
        return dict(stack=ROOFLINE, timed=[], missing={})
    table = kernel_table(profile, stack) if stack else \
        roofline_table(profile, model_config, d, r.scaleup_devices)
    terms = step_terms(table, model_config, d, r.scaleup_devices)
    r.kernels = terms.kernel_step(d.micro_batches, (model_config.num_nextn_predict_layers or 0)
                                  / model_config.num_hidden_layers)
    host = STEP_HOST_US[d.cuda_graphs]
    r.overhead_s = host.value * 1e-6
    r.layer_floor_s = 0.0
    streams = decode_streams(table.stack)
    model = dict(stack=stack or ROOFLINE, table=table.stack, source=table.source,
                 timed=list(terms.timed), missing=terms.missing, cuda_graphs=d.cuda_graphs,
                 step_host_us=_figure(host))
    if decodes:
        model["decode_streams"] = dict(
            shared_beside_routed=streams.shared_beside_routed if terms.aux else None,
            layer_scale=_figure(streams.layer_scale))
    return model


def _figure(f: Figure) -> dict:
    return dict(value=f.value, kind=f.kind, source=f.source)


def layer_floor_s(profile: DeviceProfile) -> float:
    """The least time one layer of a busy rank takes (docs/modeling.md, "The latency
    floor"); 0 where the profile gives none."""
    floor = profile.layer_floor_us
    return floor.value * 1e-6 if floor is not None else 0.0


def reload_s_per_block(config: EngineConfig, profile: DeviceProfile, model_config) -> float:
    """Seconds one KV block takes from the host tier to a device: its bytes on the device
    over the profile's host link (one direction); 0 without a host tier. Refused without a
    deployment (the bytes per token are a deployment's), a published host link, or host
    memory for the tier."""
    blocks = config.scheduler.host_kv_blocks
    if not blocks:
        return 0.0
    d = config.deployment
    if d is None:
        raise ValueError("host_kv_blocks needs a deployment: a reload's bytes are its KV "
                         "bytes per token")
    block_bytes = kv_bytes_per_token(model_config, d) * config.scheduler.block_size
    room = profile.figure("host_memory_gb") * 1e9
    if blocks * block_bytes > room:
        raise ValueError(f"host_kv_blocks {blocks} need {blocks * block_bytes / 1e9:.1f} GB "
                         f"of host memory per device; {profile.name} has "
                         f"{room / 1e9:g} GB (host_memory_gb)")
    return block_bytes / (profile.figure("host_link_gb_s") * 1e9)


class ModeledExecutor:
    holds_requests: Final = False  # only lengths matter to a roofline: no tokens, no KV

    def __init__(self, config: EngineConfig, estimator: FlopsEstimator,
                 profile: DeviceProfile) -> None:
        if config.scheduler.num_mtp and config.mtp_acceptance is None:
            raise ValueError("the modeled executor has no model to verify MTP drafts with: "
                             "set mtp_acceptance")
        self.profile = profile
        self.cost = estimator.cost_model()
        self.overhead_s = profile.step_overhead_us.value * 1e-6
        self.roofline = _core.Roofline(
            flops_per_s=profile.peak(config.precision) * 1e12 * profile.compute_efficiency.value,
            bytes_per_s=profile.figure("hbm_tb_s") * 1e12 * profile.memory_efficiency.value,
            overhead_s=self.overhead_s,
            floor_s=estimator.cfg.num_hidden_layers * layer_floor_s(profile))
        rates, self.step_model = None, None
        if config.deployment is not None:
            rates = deployment_rates(config.deployment, profile, estimator.cfg)
            self.step_model = with_kernel_tables(rates, config.deployment, profile,
                                                 estimator.cfg,
                                                 config.scheduler.engine_type != "prompt")
        # Accepted MTP drafts: numpy's seeded stream, drawn in C++ (csrc/replay/pcg64.hpp).
        # The C++ replay loop (harness/replay/native.py) steps this same object.
        self.core = _core.ModeledStep(
            self.cost, rates, self.roofline, mtp=config.scheduler.num_mtp > 0,
            acceptance=config.mtp_acceptance or 0.0,
            rng_state=np.random.default_rng(config.seed).bit_generator.state,
            reload_s_per_block=reload_s_per_block(config, profile, estimator.cfg))

    def execute(self, plan: _core.Plan) -> ExecutorOutput:
        seconds, costs, accepted = self.core.execute(plan)
        return ExecutorOutput(accepted=accepted, forward_ns=int(round(seconds * 1e9)),
                              sample_ns=0, modeled=True, flops=costs)
