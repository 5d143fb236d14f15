"""Model geometry: one dataclass, loaded from the YAML files in engine/models/: `tiny`
(CI's CPU model), `small` (a GPU smoke size), `deepseek-v3`, `deepseek-v4-flash`.

Field names follow the checkpoints' config.json (DeepSeek-V3 naming). `architecture`
says which block the geometry describes: `deepseek_v3` (MLA + MoE, the block the torch
model implements; with index_* fields, V3.2's DSA indexer) or `deepseek_v4` (hybrid
compressed attention; FLOPs and modeled devices only).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Dict, NamedTuple, Optional, Tuple, Union

from fileio.regular import check_regular
from fileio.yaml_lines import load_with_lines

MODELS_DIR = Path(__file__).resolve().parent / "models"
ARCHITECTURES = ("deepseek_v3", "deepseek_v4")
COMPRESS_RATIOS = (0, 4, 128)  # V4: 0 sliding window only, 4 CSA (indexed), 128 HCA
MLA_FIELDS = ("kv_lora_rank", "qk_nope_head_dim", "v_head_dim")
V4_FIELDS = ("head_dim", "o_lora_rank", "o_groups", "sliding_window")
INDEX_FIELDS = ("index_n_heads", "index_head_dim", "index_topk")
# Each integer field's range: generous beyond any published model (DeepSeek-V3: 61 layers,
# hidden 7,168, 256 experts), so that a typo cannot make a run build billions of layers.
WIDTH = (1, 1 << 18)
INTEGERS = dict(
    hidden_size=WIDTH, num_hidden_layers=(1, 1024), num_attention_heads=(1, 4096),
    vocab_size=(1, 1 << 24), q_lora_rank=WIDTH, qk_rope_head_dim=(0, 1 << 16),
    first_k_dense_replace=(0, 1024), moe_intermediate_size=WIDTH,
    n_routed_experts=(1, 1 << 16), n_shared_experts=(0, 1024), num_experts_per_tok=(1, 1 << 16),
    intermediate_size=WIDTH, kv_lora_rank=WIDTH, qk_nope_head_dim=(1, 1 << 16),
    v_head_dim=(1, 1 << 16), num_nextn_predict_layers=(0, 16),
    max_position_embeddings=(1, 1 << 30), index_n_heads=(1, 4096), index_head_dim=(1, 1 << 16),
    index_topk=(1, 1 << 30), head_dim=(1, 1 << 16), o_lora_rank=WIDTH, o_groups=(1, 4096),
    sliding_window=(1, 1 << 30), num_hash_layers=(0, 1024))
POSITIVE = ("rope_theta", "rms_norm_eps", "routed_scaling_factor")
NULLABLE = ("q_lora_rank", "intermediate_size", *MLA_FIELDS, *INDEX_FIELDS, *V4_FIELDS)


class ModelConfigError(ValueError):
    """A geometry the model cannot have; `field` names the culprit, where one does."""

    def __init__(self, message: str, field: Optional[str] = None) -> None:
        super().__init__(message)
        self.field = field


class MLA(NamedTuple):
    """deepseek_v3's latent attention (ModelConfig.mla)."""
    kv_lora_rank: int
    qk_nope_head_dim: int
    v_head_dim: int


class Indexer(NamedTuple):
    """The lightning indexer (ModelConfig.indexer), and the q latent it projects from."""
    index_n_heads: int
    index_head_dim: int
    index_topk: int
    q_lora_rank: int


class V4Attention(NamedTuple):
    """deepseek_v4's attention (ModelConfig.v4), and the q latent it projects from."""
    head_dim: int
    o_lora_rank: int
    o_groups: int
    sliding_window: int
    q_lora_rank: int


@dataclass(frozen=True)
class ModelConfig:
    name: str
    architecture: str  # deepseek_v3 | deepseek_v4
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    vocab_size: int
    q_lora_rank: Optional[int]  # None: q projected from the hidden state directly
    qk_rope_head_dim: int
    # FFN: the first first_k_dense_replace layers are dense, the rest MoE
    first_k_dense_replace: int
    moe_intermediate_size: int
    n_routed_experts: int
    n_shared_experts: int
    num_experts_per_tok: int
    intermediate_size: Optional[int] = None  # dense FFN; needed if first_k_dense_replace > 0
    # MLA (deepseek_v3 only): low-rank latent KV, decoupled RoPE dims
    kv_lora_rank: Optional[int] = None
    qk_nope_head_dim: Optional[int] = None
    v_head_dim: Optional[int] = None
    num_nextn_predict_layers: int = 1  # MTP modules
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6
    routed_scaling_factor: float = 1.0
    max_position_embeddings: int = 163840
    # Lightning indexer: DSA on every layer (deepseek_v3, i.e. V3.2); CSA layers (V4)
    index_n_heads: Optional[int] = None
    index_head_dim: Optional[int] = None
    index_topk: Optional[int] = None
    # deepseek_v4 only: one latent KV head of head_dim (rope included), grouped low-rank
    # output, per-layer KV compression. compress_ratios follows config.json: one entry per
    # layer, then one per MTP layer.
    head_dim: Optional[int] = None
    o_lora_rank: Optional[int] = None
    o_groups: Optional[int] = None
    sliding_window: Optional[int] = None
    compress_ratios: Tuple[int, ...] = ()
    num_hash_layers: int = 0  # the first layers route by token hash (no router GEMM)
    source: str = ""  # where the geometry comes from

    def __post_init__(self) -> None:
        self._check_numbers()
        object.__setattr__(self, "compress_ratios", tuple(self.compress_ratios))
        if self.architecture not in ARCHITECTURES:
            self._fail(f"architecture must be one of {', '.join(ARCHITECTURES)}, "
                       f"got {self.architecture!r}")
        if not 0 <= self.first_k_dense_replace <= self.num_hidden_layers:
            self._fail(f"first_k_dense_replace {self.first_k_dense_replace} is outside "
                       f"0..{self.num_hidden_layers}")
        if self.first_k_dense_replace > 0 and self.intermediate_size is None:
            self._fail("intermediate_size is required when first_k_dense_replace > 0")
        if self.num_experts_per_tok > self.n_routed_experts:
            self._fail(f"num_experts_per_tok {self.num_experts_per_tok} > "
                       f"n_routed_experts {self.n_routed_experts}")
        if len({getattr(self, f) is None for f in INDEX_FIELDS}) > 1:
            self._fail(f"set all or none of {', '.join(INDEX_FIELDS)}")
        if self.has_indexer and self.q_lora_rank is None:
            self._fail("the indexer projects its queries from the q latent: set q_lora_rank")
        if self.architecture == "deepseek_v3":
            self._require(MLA_FIELDS, present=True)
            self._require(V4_FIELDS + ("compress_ratios",), present=False)
        else:
            self._check_v4()

    def _check_numbers(self) -> None:
        for name, (low, high) in INTEGERS.items():
            v = getattr(self, name)
            if v is None and name in NULLABLE:
                continue
            if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high:
                self._fail(f"{name}: expected an integer in {low}..{high}"
                           + (" or null" if name in NULLABLE else "") + f", got {v!r}", name)
        for name in POSITIVE:
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
                    or v <= 0:
                self._fail(f"{name}: expected a finite number > 0, got {v!r}", name)
        if not isinstance(self.compress_ratios, (list, tuple)):
            self._fail(f"compress_ratios: expected a list, got {self.compress_ratios!r}",
                       "compress_ratios")

    def _check_v4(self) -> None:
        self._require(V4_FIELDS + ("q_lora_rank",), present=True)
        self._require(MLA_FIELDS, present=False)
        expected = self.num_hidden_layers + self.num_nextn_predict_layers
        if len(self.compress_ratios) != expected:
            self._fail(f"compress_ratios has {len(self.compress_ratios)} entries; expected "
                       f"{expected} (num_hidden_layers + num_nextn_predict_layers)")
        bad = sorted(set(self.compress_ratios) - set(COMPRESS_RATIOS))
        if bad:
            self._fail(f"compress_ratios values must be in {COMPRESS_RATIOS}, got {bad}")
        if 4 in self.compress_ratios and not self.has_indexer:
            self._fail(f"CSA layers (compress ratio 4) need {', '.join(INDEX_FIELDS)}")
        if self.num_attention_heads % self.v4.o_groups:
            self._fail(f"o_groups {self.o_groups} does not divide num_attention_heads "
                       f"{self.num_attention_heads}")

    def _require(self, names, present: bool) -> None:
        wrong = [n for n in names if bool(getattr(self, n) not in (None, ())) != present]
        if wrong:
            verb = "needs" if present else "must not set"
            self._fail(f"{self.architecture} {verb} {', '.join(wrong)}")

    def _fail(self, message: str, field: Optional[str] = None) -> None:
        raise ModelConfigError(f"model {self.name}: {message}", field)

    @property
    def has_indexer(self) -> bool:
        return self.index_topk is not None

    @property
    def dense_intermediate_size(self) -> int:
        """intermediate_size, which __post_init__ requires where there are dense layers."""
        size = self.intermediate_size
        assert size is not None, f"model {self.name}: no dense FFN (first_k_dense_replace 0)"
        return size

    @property
    def mla(self) -> MLA:
        """The MLA fields, which __post_init__ requires of deepseek_v3."""
        lkv, nope, v = self.kv_lora_rank, self.qk_nope_head_dim, self.v_head_dim
        assert lkv is not None and nope is not None and v is not None, \
            f"model {self.name}: {self.architecture} has no MLA"
        return MLA(lkv, nope, v)

    @property
    def indexer(self) -> Optional[Indexer]:
        """The indexer's fields, None without one (__post_init__: all or none, and then
        q_lora_rank)."""
        n, d, topk, lq = self.index_n_heads, self.index_head_dim, self.index_topk, self.q_lora_rank
        if topk is None:
            return None
        assert n is not None and d is not None and lq is not None, \
            f"model {self.name}: an indexer without all its fields and q_lora_rank"
        return Indexer(n, d, topk, lq)

    @property
    def v4(self) -> V4Attention:
        """The deepseek_v4 attention fields, which __post_init__ requires of deepseek_v4."""
        d, rank, groups = self.head_dim, self.o_lora_rank, self.o_groups
        window, lq = self.sliding_window, self.q_lora_rank
        assert (d is not None and rank is not None and groups is not None and window is not None
                and lq is not None), f"model {self.name}: {self.architecture} has no V4 attention"
        return V4Attention(d, rank, groups, window, lq)

    @property
    def qk_head_dim(self) -> int:
        if self.architecture == "deepseek_v4":
            return self.v4.head_dim
        return self.mla.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def kv_cache_dim(self) -> int:
        """Elements of one cached KV entry in one layer (MLA: kv_lora_rank + rope;
        V4: one head_dim latent, raw in the window or compressed)."""
        if self.architecture == "deepseek_v4":
            return self.v4.head_dim
        return self.mla.kv_lora_rank + self.qk_rope_head_dim

    @property
    def layer_compress_ratios(self) -> Tuple[int, ...]:
        return self.compress_ratios[:self.num_hidden_layers]

    @property
    def mtp_compress_ratios(self) -> Tuple[int, ...]:
        return self.compress_ratios[self.num_hidden_layers:]


def load_model_config(name_or_path: Union[str, Path]) -> ModelConfig:
    """A bundled model by name (engine/models/NAME.yaml) or a YAML file by path."""
    path = Path(name_or_path)
    if path.suffix not in (".yaml", ".yml"):
        path = MODELS_DIR / f"{name_or_path}.yaml"
        if not path.is_file():
            known = ", ".join(sorted(p.stem for p in MODELS_DIR.glob("*.yaml")))
            raise ValueError(f"unknown model {name_or_path!r}; bundled models: {known}")
    stat = check_regular(path).stat()
    key = (str(path), stat.st_mtime_ns, stat.st_size)
    if key not in _PARSED:
        _PARSED[key] = _parse(path)
    return _PARSED[key]


# Each file parsed once a process, while it is unchanged: a workload's load asks for its
# model several times, and a sweep resolves many workloads of one model (a config is frozen).
_PARSED: Dict[Tuple[str, int, int], ModelConfig] = {}


def _parse(path: Path) -> ModelConfig:
    data, lines = load_with_lines(path)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping of model fields")
    names = {f.name for f in fields(ModelConfig)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ValueError(f"{path}:{lines[(unknown[0],)]}: {unknown[0]}: unknown model field; "
                         f"expected one of {', '.join(sorted(names))}")
    data.setdefault("name", path.stem)
    try:
        return ModelConfig(**data)
    except ModelConfigError as e:
        line = lines.get((e.field,)) if e.field else None
        raise ValueError(f"{path}:{line}: {e}" if line else f"{path}: {e}") from None
    except TypeError as e:
        raise ValueError(f"{path}: {e}") from None
