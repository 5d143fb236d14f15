"""Prefill/decode disaggregation: a service of two pools of identical instances, prefill
instances running `prompt` engines and decode instances running `completion` engines,
the KV moving between them over a link, and a router in front of each pool. Each
instance is a Deployment on its device, with its own engine keys.

The names are the field's: SGLang's PD router and Dynamo's disaggregated serving (xPyD: x
prefill and y decode instances). docs/disaggregation.md is the reference; the replay
is harness/replay/disaggregated.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Tuple, Union

from .deployment import Deployment, DeploymentError
from .devices.profile import DeviceProfile

ROLES = ("prefill", "decode")
ENGINE_TYPES = {"prefill": "prompt", "decode": "completion"}
LINKS = ("scaleout", "scaleup")  # or a number: GB/s per device, one direction
PREFILL_ROUTERS = ("round_robin", "least_tokens", "cache_aware", "session_affinity")
DECODE_ROUTERS = ("round_robin", "least_kv")


@dataclass(frozen=True)
class Pool:
    """`instances` identical instances of one role, each laid out as `deployment` on
    `device` (an executor spec, modeled:<profile>), its scheduler the workload's `engine:`
    with the pool's own keys over it."""

    role: str
    instances: int
    device: str
    deployment: Deployment
    engine: Mapping[str, Any] = field(default_factory=dict)

    @property
    def devices(self) -> int:
        return self.instances * self.deployment.devices


@dataclass(frozen=True)
class KVTransfer:
    """How a prefilled sequence's KV reaches its decode instance: over each device's
    `link` (a profile's scale-out or scale-up bandwidth, or a number of GB/s per device in
    one direction), after `latency_us`, and layer by layer with the last chunk's prefill
    when `layerwise`."""

    link: Union[str, float] = "scaleout"
    latency_us: float = 20.0
    layerwise: bool = True

    def bytes_per_s(self, profile: DeviceProfile) -> float:
        """One device's bandwidth for KV, one direction: a profile's figure at its
        network efficiency (as its all-to-all), or the number given, as given."""
        if not isinstance(self.link, str):
            return float(self.link) * 1e9
        efficiency = profile.network_efficiency.value
        if self.link == "scaleup":
            return profile.figure("interconnect_gb_s") / 2 * 1e9 * efficiency
        figure = profile.scaleout_gb_s
        assert figure is not None, "Disaggregation.check refuses a scale-out link without one"
        return figure.value * 1e9 * efficiency


@dataclass(frozen=True)
class Disaggregation:
    prefill: Pool
    decode: Pool
    kv_transfer: KVTransfer = KVTransfer()
    prefill_router: str = "round_robin"
    decode_router: str = "round_robin"

    @property
    def pools(self) -> Tuple[Pool, Pool]:
        return self.prefill, self.decode

    @property
    def devices(self) -> int:
        return self.prefill.devices + self.decode.devices

    def check(self, profiles: Mapping[str, DeviceProfile]) -> None:
        """DeploymentError, naming the key, for a link a pool's device does not have.
        `profiles`: each role's device profile."""
        link = self.kv_transfer.link
        if not isinstance(link, str):
            return
        for role in ROLES:
            profile = profiles[role]
            missing = profile.scaleout_gb_s is None if link == "scaleout" \
                else profile.interconnect_gb_s is None
            if missing:
                other = "" if profiles["prefill"] is profiles["decode"] else \
                    " (pools on different devices need the link on both)"
                raise DeploymentError(("kv_transfer", "link"), f"{role} instances run on "
                                      f"{profile.name}, which has no published {link} "
                                      f"bandwidth{other}: expected a number of GB/s per "
                                      f"device, or a link it has")


def from_values(v: Mapping[str, Any], device: str, precision: str) -> Disaggregation:
    """A workload's P/D `deployment:` (harness/workload: defaults filled in)."""
    prefill, decode = (Pool(role, v[role]["instances"], v[role]["device"] or device,
                            Deployment.from_values(v[role], precision), dict(v[role]["engine"]))
                       for role in ROLES)
    t, r = v["kv_transfer"], v["router"]
    return Disaggregation(prefill, decode,
                          KVTransfer(t["link"], t["latency_us"], t["layerwise"]),
                          r["prefill"], r["decode"])
