"""Bundled model geometries and ModelConfig validation."""

import dataclasses

import pytest
import yaml

from engine.model_config import MODELS_DIR, ModelConfig, load_model_config

BUNDLED = ("tiny", "small", "deepseek-v3", "deepseek-v4-flash")


@pytest.mark.parametrize("name", BUNDLED)
def test_bundled_models_load(name):
    cfg = load_model_config(name)
    assert cfg.name == name and cfg.source


def test_tiny_is_the_ci_geometry():
    cfg = load_model_config("tiny")
    expected = dict(
        architecture="deepseek_v3", hidden_size=64, num_hidden_layers=2,
        first_k_dense_replace=1, num_attention_heads=4, q_lora_rank=32, kv_lora_rank=32,
        qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, intermediate_size=128,
        moe_intermediate_size=32, n_routed_experts=8, n_shared_experts=1,
        num_experts_per_tok=2, vocab_size=256, num_nextn_predict_layers=1,
        max_position_embeddings=4096)
    assert {name: getattr(cfg, name) for name in expected} == expected
    assert (cfg.qk_head_dim, cfg.kv_cache_dim) == (24, 40)


def test_v3_derived_dims():
    cfg = load_model_config("deepseek-v3")
    assert (cfg.qk_head_dim, cfg.kv_cache_dim) == (192, 576)
    assert not cfg.has_indexer and cfg.compress_ratios == ()


def test_v4_flash_layer_plan():
    cfg = load_model_config("deepseek-v4-flash")
    # hardware_and_models.md §2.2: [0,0] + [4,128]*20 + [4] for 43 layers, then 0 for MTP
    assert cfg.layer_compress_ratios == (0, 0) + (4, 128) * 20 + (4,)
    assert cfg.mtp_compress_ratios == (0,)
    assert (cfg.qk_head_dim, cfg.kv_cache_dim) == (512, 512)
    assert cfg.kv_lora_rank is None and cfg.intermediate_size is None


def write(tmp_path, data):
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def v4_fields(**overrides):
    data = {f.name: getattr(load_model_config("deepseek-v4-flash"), f.name)
            for f in dataclasses.fields(ModelConfig)}
    data["compress_ratios"] = list(data["compress_ratios"])
    data.pop("name")
    return {**data, **overrides}


@pytest.mark.parametrize("overrides, match", [
    (dict(compress_ratios=[0] * 43), "expected 44"),
    (dict(compress_ratios=[0, 0] + [4, 64] * 20 + [4, 0]), "must be in"),
    (dict(kv_lora_rank=512), "must not set kv_lora_rank"),
    (dict(index_topk=None), "set all or none"),
    (dict(index_topk=None, index_n_heads=None, index_head_dim=None), "CSA layers"),
    (dict(o_groups=7), "does not divide"),
    (dict(head_dim=None), "needs head_dim"),
])
def test_v4_validation(tmp_path, overrides, match):
    with pytest.raises(ValueError, match=match):
        load_model_config(write(tmp_path, v4_fields(**overrides)))


def test_v3_validation(tmp_path):
    data = yaml.safe_load((MODELS_DIR / "tiny.yaml").read_text())
    for overrides, match in [(dict(kv_lora_rank=None), "needs kv_lora_rank"),
                             (dict(head_dim=512), "must not set head_dim"),
                             (dict(intermediate_size=None), "intermediate_size is required"),
                             (dict(num_experts_per_tok=9), "num_experts_per_tok 9"),
                             (dict(architecture="llama"), "architecture must be"),
                             (dict(hidden_sise=64), "unknown model field")]:
        with pytest.raises(ValueError, match=match):
            load_model_config(write(tmp_path, {**data, **overrides}))


def test_unknown_model_lists_the_bundled_ones():
    with pytest.raises(ValueError, match="bundled models: deepseek-v3, deepseek-v4-flash"):
        load_model_config("deepseek-v5")


@pytest.mark.parametrize("field, value, words", [
    ("num_hidden_layers", 1_000_000_000, "num_hidden_layers: expected an integer in 1..1024, "
                                         "got 1000000000"),
    ("hidden_size", 0, "hidden_size: expected an integer in 1..262144, got 0"),
    ("hidden_size", 64.5, "hidden_size: expected an integer in 1..262144, got 64.5"),
    ("vocab_size", -1, "vocab_size: expected an integer in 1..16777216, got -1"),
    ("num_attention_heads", True, "num_attention_heads: expected an integer"),
    ("kv_lora_rank", "512", "kv_lora_rank: expected an integer in 1..262144 or null, got '512'"),
    ("rms_norm_eps", float("nan"), "rms_norm_eps: expected a finite number > 0, got nan"),
])
def test_a_geometry_no_model_has_is_refused_by_file_line_and_field(tmp_path, field, value,
                                                                    words):
    """A typo must not build a billion layers (validation used to take hours) nor run a
    model of width 0: every integer field has a range, named with the file and line."""
    data = yaml.safe_load((MODELS_DIR / "tiny.yaml").read_text())
    path = write(tmp_path, {**data, field: value})
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1)
                if text.startswith(f"{field}:"))
    with pytest.raises(ValueError) as e:
        load_model_config(path)
    assert str(e.value).startswith(f"{path}:{line}: model m: {words}")
