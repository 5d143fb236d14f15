"""How one serving instance spreads the model over devices, named as SGLang and
TensorRT-LLM name it: DP or TP attention, EP or TP experts, the dense FFN and LM head
sharded or replicated, one or two micro-batches, a precision per part.

check() refuses what no engine could run, naming the key: degrees that do not divide the
devices or the experts, a TP group wider than the scale-up domain, a precision the device
has no peak for. docs/workloads.md is the reference; docs/modeling.md the step it times.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Dict, Iterator, Optional, Tuple

from .devices.profile import PRECISIONS, DeviceProfile
from .model_config import ModelConfig

BYTES = {"bf16": 2.0, "fp8": 1.0, "fp4": 0.5, "int8": 1.0}
COMPUTE_PARTS = ("attention", "dense", "experts")  # GEMMs: timed at the device's peak
KV_PRECISIONS = ("bf16", "fp8")
# The hottest device's expert load over the mean, by default: SGLang's 96 x H100 prefill
# ran 59,337 tok/s per node with simulated perfect balancing and 50,302 with its default
# EPLB (LMSYS blog, 2025-05-05): 1.18.
DEFAULT_IMBALANCE = 1.18
# A deployment's stack naming no kernel tables: every part a roofline (docs/modeling.md)
ROOFLINE = "roofline"
# vLLM's gpu_memory_utilization default: the rest is activations, workspace, graphs.
DEFAULT_MEMORY_UTILIZATION = 0.9


class DeploymentError(ValueError):
    def __init__(self, key: Tuple[str, ...], message: str) -> None:
        super().__init__(f"deployment.{'.'.join(key)}: {message}")
        self.key = key
        self.message = message


@dataclass(frozen=True)
class Setting:
    """One key of a workload's `deployment:` section: where it sits, the values it takes
    (an integer, or a `number`, of at least `low`; or one of `choices`) and its meaning. A
    `null` key defaults to null, which Deployment.from_values resolves as `meaning` says;
    any other defaults to its field's default (harness/workload/schema.py builds the
    section's keys from these)."""

    key: str  # dotted, under `deployment:`
    meaning: str
    low: float = 1
    high: Optional[float] = None
    strict: bool = False  # above `low`, not at it
    number: bool = False  # any finite number, not only an integer
    choices: Tuple[Any, ...] = ()
    null: bool = False
    word: bool = False  # one word of text (a name), not a number


def _keys(*settings: Setting) -> Dict[str, Tuple[Setting, ...]]:
    return {"keys": settings}


@dataclass(frozen=True)
class Deployment:
    """A serving instance's layout. Each field's default is the documented one; its
    metadata holds the workload keys that set it (settings())."""

    devices: int = field(default=1, metadata=_keys(Setting("devices", "devices per instance")))
    attention_dp: int = field(default=1, metadata=_keys(Setting(
        "attention.dp", "DP attention ranks (the scheduler's dp_size); null: devices / tp",
        null=True)))
    attention_tp: int = field(default=1, metadata=_keys(Setting(
        "attention.tp", "attention TP group per DP rank")))
    moe_ep: int = field(default=1, metadata=_keys(Setting(
        "moe.ep", "expert parallelism; null: devices / tp", null=True)))
    moe_tp: int = field(default=1, metadata=_keys(Setting(
        "moe.tp", "each expert split over this many devices")))
    dense_tp: int = field(default=1, metadata=_keys(Setting(
        "dense.tp", "dense FFN, shared experts, LM head; 1: replicated")))
    # 2: one micro-batch's all-to-all hidden under the other's compute
    micro_batches: int = field(default=1, metadata=_keys(Setting(
        "micro_batches", "2: two-batch overlap", choices=(1, 2))))
    precision: Dict[str, str] = field(
        default_factory=lambda: {"attention": "bf16", "kv": "bf16", "dense": "bf16",
                                 "experts": "bf16", "dispatch": "bf16", "combine": "bf16"},
        metadata=_keys(
            *(Setting(f"precision.{part}", "GEMMs; null: the workload's precision",
                      choices=PRECISIONS, null=True) for part in COMPUTE_PARTS),
            Setting("precision.kv", "KV cache; null: bf16", choices=KV_PRECISIONS, null=True),
            Setting("precision.dispatch", "payload; null: the workload's precision",
                    choices=PRECISIONS, null=True),
            Setting("precision.combine", "payload; null: bf16", choices=PRECISIONS, null=True)))
    redundant_experts: int = field(default=0, metadata=_keys(Setting(
        "redundant_experts", "extra expert replicas (EPLB)", low=0)))
    expert_imbalance: float = field(default=DEFAULT_IMBALANCE, metadata=_keys(Setting(
        "expert_imbalance", "hottest device's expert load over the mean", number=True)))
    stack: Optional[str] = field(default=None, metadata=_keys(Setting(
        "stack", "the software stack whose kernel tables time the step (a name under the "
        "profile's `kernels:`, or roofline); null: the profile's first, or roofline where "
        "it has none", word=True, null=True)))
    cuda_graphs: bool = field(default=True, metadata=_keys(Setting(
        "cuda_graphs", "decode steps replayed as CUDA graphs: the host's cost a step",
        choices=(True, False))))
    memory_utilization: float = field(default=DEFAULT_MEMORY_UTILIZATION, metadata=_keys(Setting(
        "memory_utilization", "share of HBM for weights and KV (on a torch device also the "
        "measured activations)", low=0, high=1, strict=True, number=True)))

    @classmethod
    def from_values(cls, v: dict, precision: str) -> Deployment:
        """The workload's `deployment:` section, its defaults filled in (harness.workload);
        parts without a precision run at the workload's `precision`, combine at BF16."""
        devices = v["devices"]
        tp, moe_tp = v["attention"]["tp"], v["moe"]["tp"]
        dp = v["attention"]["dp"] or max(devices // tp, 1)  # default: the rest of the devices
        ep = v["moe"]["ep"] or max(devices // moe_tp, 1)
        given = v["precision"]
        parts = {p: given[p] or precision for p in COMPUTE_PARTS}
        parts.update(kv=given["kv"] or "bf16", dispatch=given["dispatch"] or precision,
                     combine=given["combine"] or "bf16")
        return cls(devices=devices, attention_dp=dp, attention_tp=tp, moe_ep=ep, moe_tp=moe_tp,
                   dense_tp=v["dense"]["tp"],
                   micro_batches=v["micro_batches"], precision=parts,
                   redundant_experts=v["redundant_experts"],
                   expert_imbalance=v["expert_imbalance"], stack=v["stack"],
                   cuda_graphs=v["cuda_graphs"], memory_utilization=v["memory_utilization"])

    @staticmethod
    def settings() -> Iterator[Tuple[Setting, Any]]:
        """Every key of the `deployment:` section in order, with its default in a workload:
        null, or its field's default (a precision part's for the precision map)."""
        defaults = Deployment()
        for f in fields(Deployment):
            value = getattr(defaults, f.name)
            for s in f.metadata["keys"]:
                part = s.key.rpartition(".")[2]
                yield s, None if s.null else value[part] if isinstance(value, dict) else value

    def kernel_stack(self, profile: DeviceProfile) -> Optional[str]:
        """The stack whose kernel tables time the step on `profile`, or None (rooflines)."""
        if self.stack == ROOFLINE:
            return None
        return self.stack or next(iter(profile.kernels), None)

    def _check_table(self, profile: DeviceProfile) -> None:
        """The stack's kernel table read (once a process), so a malformed one is refused
        with its line before anything runs."""
        from .kernels.load import kernel_table
        from .kernels.table import KernelTableError

        stack = self.kernel_stack(profile)
        if stack is None:
            return
        try:
            kernel_table(profile, stack)
        except (KernelTableError, OSError) as e:
            raise DeploymentError(("stack",), f"{profile.name}'s {stack} kernel table: {e}") \
                from None

    def check(self, model: ModelConfig, profile: DeviceProfile) -> None:
        """DeploymentError, naming the key, for what no serving engine could run."""
        n = self.devices
        if self.attention_dp * self.attention_tp != n:
            raise DeploymentError(("attention",), f"dp x tp must equal devices ({n}), got "
                                  f"dp {self.attention_dp} x tp {self.attention_tp}")
        if self.moe_ep * self.moe_tp != n:
            raise DeploymentError(("moe",), f"ep x tp must equal devices ({n}), got "
                                  f"ep {self.moe_ep} x tp {self.moe_tp}")
        if n % self.dense_tp:
            raise DeploymentError(("dense", "tp"), f"must divide devices ({n}), got "
                                  f"{self.dense_tp}")
        experts = model.n_routed_experts
        if self.moe_ep > experts:
            raise DeploymentError(("moe", "ep"), f"{self.moe_ep} is more than {model.name}'s "
                                  f"{experts} routed experts")
        if (experts + self.redundant_experts) % self.moe_ep:
            raise DeploymentError(("moe", "ep"), f"must divide the routed experts plus the "
                                  f"redundant ones ({experts} + {self.redundant_experts}), got "
                                  f"{self.moe_ep}")
        if model.moe_intermediate_size % self.moe_tp:
            raise DeploymentError(("moe", "tp"), f"must divide moe_intermediate_size "
                                  f"({model.moe_intermediate_size}), got {self.moe_tp}")
        if model.num_attention_heads % self.attention_tp:
            raise DeploymentError(("attention", "tp"), f"must divide {model.name}'s "
                                  f"{model.num_attention_heads} attention heads, got "
                                  f"{self.attention_tp}")
        domain = int(profile.scaleup_devices.value)
        for key, group in ((("attention", "tp"), self.attention_tp), (("moe", "tp"), self.moe_tp),
                           (("dense", "tp"), self.dense_tp)):
            if group > domain:
                raise DeploymentError(key, f"a TP group of {group} is wider than {profile.name}'s "
                                      f"scale-up domain of {domain} devices")
        if n > domain and profile.scaleout_gb_s is None:
            raise DeploymentError(("devices",), f"{n} devices span more than one scale-up "
                                  f"domain of {domain}, and {profile.name} has no published "
                                  f"scale-out bandwidth")
        for part in COMPUTE_PARTS:
            if profile.peak_tflops[self.precision[part]] is None:
                raise DeploymentError(("precision", part), f"{profile.name} has no published "
                                      f"dense {self.precision[part]} peak; published: "
                                      f"{', '.join(profile.published())}")
        if self.stack not in (None, ROOFLINE) and self.stack not in profile.kernels:
            raise DeploymentError(("stack",), f"{profile.name} has no {self.stack} kernel "
                                  f"tables; it has: {', '.join(profile.kernels) or 'none'} "
                                  f"(or roofline)")
        self._check_table(profile)
        if self.precision["kv"] not in KV_PRECISIONS:
            raise DeploymentError(("precision", "kv"), f"expected one of "
                                  f"{', '.join(KV_PRECISIONS)}, got {self.precision['kv']}")

