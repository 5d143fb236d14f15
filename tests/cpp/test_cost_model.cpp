// CostModel without Python, on the tiny test geometry (engine/model_config.py's "tiny").
// The expected totals are FlopsEstimator.calc_flops's on the same batches, printed from
// Python once (weight and expert bytes 1, KV bytes 2, index KV bytes 1).
#include <cmath>

#include "cost_model.hpp"
#include "harness.hpp"
#include "tiny_model.hpp"

using namespace steptrace;

namespace {

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
