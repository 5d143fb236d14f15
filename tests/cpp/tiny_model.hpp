// The tiny test geometry (engine/model_config.py's "tiny") for the C++-only tests.
#pragma once

#include "cost_model.hpp"

inline steptrace::ModelGeometry tiny() {
  steptrace::ModelGeometry g;
  g.name = "tiny";
  g.architecture = "deepseek_v3";
  g.hidden_size = 64;
  g.num_hidden_layers = 2;
  g.num_attention_heads = 4;
  g.vocab_size = 256;
  g.q_lora_rank = 32;
  g.qk_rope_head_dim = 8;
  g.first_k_dense_replace = 1;
  g.intermediate_size = 128;
  g.moe_intermediate_size = 32;
  g.n_routed_experts = 8;
  g.n_shared_experts = 1;
  g.num_experts_per_tok = 2;
  g.kv_lora_rank = 32;
  g.qk_nope_head_dim = 16;
  g.v_head_dim = 16;
  g.num_nextn_predict_layers = 1;
  return g;
}
