// CostModel without Python, on the tiny test geometry (engine/model_config.py's "tiny").
// The expected totals are FlopsEstimator.calc_flops's on the same batches, printed from
// Python once (weight and expert bytes 1, KV bytes 2, index KV bytes 1).
#include <cmath>

#include "cost_model.hpp"
#include "harness.hpp"

using namespace steptrace;

namespace {

ModelGeometry tiny() {
  ModelGeometry g;
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

Batch batch(std::initializer_list<int32_t> q, std::initializer_list<int32_t> k, RowKind kind) {
  Batch b;
  Batch::Rows rows = b.open_rows(q.size());
  auto ki = k.begin();
  int32_t i = 0;
  for (int32_t x : q) rows.add(i, i, x, x, *ki++, kind, 0), ++i;
  b.close_rows(rows);
  return b;
}

bool close(double a, double b) { return std::fabs(a - b) <= 1e-12 * std::fabs(b); }

const CostModel model(tiny(), ByteSizes{1.0, 1.0, 2.0, 1.0});

}  // namespace

TEST(two_final_chunks_cost_what_calc_flops_says) {
  const StepCost c = model.batch(batch({40, 10}, {40, 10}, kFinal), nullptr, false);
  EXPECT(close(c.model_flops, 8151936.0));
  EXPECT(close(c.executed_flops, 8151936.0));
  EXPECT(close(c.bytes, 144511.97216415795));
}

TEST(two_decode_steps_cost_what_calc_flops_says) {
  const StepCost c = model.batch(batch({1, 1}, {11, 41}, kDecode), nullptr, false);
  EXPECT(close(c.model_flops, 426496.0));
  EXPECT(close(c.executed_flops, 426496.0));
  EXPECT(close(c.bytes, 109504.0));
}

TEST(an_empty_batch_costs_nothing) {
  const StepCost c = model.batch(Batch{}, nullptr, false);
  EXPECT(c.model_flops == 0 && c.executed_flops == 0 && c.bytes == 0);
}

TEST(rejected_drafts_are_executed_but_not_model_flops) {
  const int64_t none[] = {0};
  const StepCost c = model.batch(batch({3}, {20}, kDecode), none, true);
  EXPECT(c.executed_flops > c.model_flops && c.model_flops > 0);
}
