// What a decode round reuses from earlier rounds, held to the scheduler's own state over long
// random runs: a recycled plan's block-table rows are rewritten only where a sequence's block
// list changed (Batch::row_marks), and the decode list is sorted again only when it may be out
// of order (Rank::decode_sorted). Every row of every plan must hold its sequence's blocks, -1
// padded, and every decode batch must list its sequences in the contract's order.
#include <algorithm>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "harness.hpp"
#include "scheduler.hpp"

using namespace steptrace;

namespace {

struct Lcg {
  uint64_t state;
  int32_t below(int32_t n) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<int32_t>((state >> 33) % static_cast<uint64_t>(n));
  }
};

// Each row holds its sequence's blocks, -1 padded, and the table is as wide as the most.
bool tables_hold_blocks(const Scheduler& s, const Batch& b) {
  int32_t widest = 0;
  for (size_t j = 0; j < b.rows(); ++j) {
    const std::vector<int32_t>& blocks = s.at(b.seq_index[j]).blocks;
    widest = std::max(widest, static_cast<int32_t>(blocks.size()));
    const int32_t* row = b.block_tables.get() + j * b.table_width;
    for (int32_t k = 0; k < b.table_width; ++k)
      if (row[k] != (k < static_cast<int32_t>(blocks.size()) ? blocks[k] : -1)) return false;
  }
  return widest == b.table_width;
}

// Rows are taken from the end of the decode order: by output length, ascending with
// longest_output first (descending with shortest_output), later adds first among equals.
bool decode_rows_in_order(const Scheduler& s, const Batch& b, PreemptOrder order) {
  for (size_t j = 0; j + 1 < b.rows(); ++j) {
    const Sequence& x = s.at(b.seq_index[j]);
    const Sequence& y = s.at(b.seq_index[j + 1]);
    const bool in_order =
        x.output_len() != y.output_len()
            ? (x.output_len() < y.output_len()) == (order == PreemptOrder::kLongestOutput)
            : x.order > y.order;
    if (!in_order) return false;
  }
  return true;
}

// Arrivals, prefix sharing (three prompt families), preemption (a small pool), drafts
// accepted at random; plans post-processed in order, one left in flight with overlap.
void run(SchedulerConfig cfg, bool retain, uint64_t seed) {
  cfg.max_num_batched_tokens = 32;
  cfg.max_num_seqs = 6;
  Scheduler s(cfg, retain);
  Lcg rng{seed};
  std::deque<std::shared_ptr<ScheduleOutput>> outstanding;
  int64_t next_id = 0;
  int decode_plans = 0;
  const std::string where = "seed " + std::to_string(seed);
  for (int step = 0; step < 400; ++step) {
    if (step < 250 && rng.below(3) == 0) {
      const int32_t prompt_len = 1 + rng.below(40);
      const int32_t family = rng.below(3);
      std::vector<int64_t> hash_ids;
      for (int32_t i = 0; i < prompt_len / cfg.block_size; ++i)
        hash_ids.push_back(family * 1000 + i);
      s.add_sequence(next_id++, prompt_len, 1 + rng.below(30), 0.0, hash_ids);
    }
    auto plan = s.schedule();
    s.check_invariants();
    for (const Batch& b : plan->batches) {
      if (!tables_hold_blocks(s, b)) harness::fail(__FILE__, __LINE__, where + " tables");
      if (plan->phase == Phase::kDecode && !decode_rows_in_order(s, b, cfg.preempt_order))
        harness::fail(__FILE__, __LINE__, where + " decode order");
    }
    decode_plans += plan->phase == Phase::kDecode && !plan->batches[0].empty();
    outstanding.push_back(std::move(plan));
    while (outstanding.size() > (cfg.overlap ? 1u : 0u)) {
      const ScheduleOutput& oldest = *outstanding.front();
      std::vector<int64_t> accepted;
      for (const Batch& b : oldest.batches)
        for (size_t j = 0; j < b.rows(); ++j)
          accepted.push_back(b.kind[j] == kDecode ? rng.below(b.seqlen_q[j]) : 0);
      s.postprocess(oldest, &accepted);
      s.check_invariants();
      outstanding.pop_front();  // nothing else holds it: the next schedule() may reuse it
    }
  }
  EXPECT(decode_plans > 100);
}

}  // namespace

TEST(recycled_tables_and_decode_order_follow_the_sequences) {
  uint64_t seed = 1;
  for (EngineType engine : {EngineType::kNormal, EngineType::kCompletion})
    for (PreemptOrder order : {PreemptOrder::kLongestOutput, PreemptOrder::kShortestOutput})
      for (int32_t num_mtp : {0, 2})
        for (bool overlap : {false, true})
          for (int32_t dp_size : {1, 2})
            for (bool retain : {true, false}) {
              SchedulerConfig cfg;
              cfg.engine_type = engine;
              cfg.preempt_order = order;
              cfg.num_mtp = num_mtp;
              cfg.overlap = overlap;
              cfg.dp_size = dp_size;
              cfg.block_size = 1 + static_cast<int32_t>(seed % 4);
              cfg.num_kv_blocks = 80 / cfg.block_size;  // small: preemptions every run
              run(cfg, retain, seed++);
            }
}

// The decode round of tests/bench/test_decode_round.py, where nothing joins or leaves: one
// plan reused round after round, its order kept and its rows rewritten as blocks are added.
TEST(a_steady_decode_round_reuses_its_plan) {
  SchedulerConfig cfg;
  cfg.max_num_batched_tokens = 64 * 128;
  cfg.max_num_seqs = 64;
  cfg.num_kv_blocks = 64 * 16;
  cfg.block_size = 16;
  Scheduler s(cfg);
  for (int32_t i = 0; i < 64; ++i) s.add_sequence(i, 40 + i, 1000, 0.0);
  s.postprocess(*s.schedule(), nullptr);
  const ScheduleOutput* reused = nullptr;
  for (int round = 0; round < 100; ++round) {
    auto plan = s.schedule();
    EXPECT(plan->phase == Phase::kDecode && plan->batches[0].rows() == 64);
    EXPECT(tables_hold_blocks(s, plan->batches[0]));
    EXPECT(decode_rows_in_order(s, plan->batches[0], cfg.preempt_order));
    if (round > 0) EXPECT(plan.get() == reused);
    reused = plan.get();
    s.postprocess(*plan, nullptr);
  }
}
