// A P/D request's one requests row, without Python: a prefill instance's step log
// (Handoffs::kKept) keeps the request its prompt engine hands off, the replay fills in its
// P/D columns there, and the decode instance's log takes it in and writes the joined row
// (docs/disaggregation.md, "What is recorded"); one no decode instance took in is
// unfinished between the pools at the end; a prompt engine's log of Handoffs::kRow writes
// the hand-off's own end code.
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness.hpp"
#include "recorder/step_log.hpp"
#include "scheduler.hpp"
#include "small_engine.hpp"

using namespace steptrace;

namespace {

// Steps the scheduler until it holds nothing, step k recorded as [t0 + k, t0 + k + 1].
void drain(Scheduler& s, StepLog& log, double t0) {
  for (int k = 0; k < 1000 && !s.is_finished(); ++k) {
    const auto plan = s.schedule();
    const PostprocessOutput post = s.postprocess(*plan, nullptr);
    const double t = t0 + k;
    log.record(*plan, post, RecordedTimes{t, t + 1, StepTimes{}, 0},
               std::vector<StepCost>(plan->batches.size()));
  }
}

// Requests 0 and 1 (prompts of 40 and 8 tokens, 3 output tokens) enqueued at 0.5 on a
// prompt engine and prefilled, its steps from 1.0.
void prefill_two(Scheduler& s, StepLog& log) {
  log.enqueue(s.add_sequence(0, 40, 3, 0.5), 0.5);
  log.enqueue(s.add_sequence(1, 8, 3, 0.5), 0.5);
  drain(s, log, 1.0);
}

}  // namespace

TEST(decode_log_writes_the_joined_row) {
  Scheduler p(small_engine(EngineType::kPrompt)), d(small_engine(EngineType::kCompletion));
  StepLog prefill(0, Handoffs::kKept, 1), decode(0);
  prefill_two(p, prefill);
  EXPECT(prefill.requests().request_id.empty() && prefill.num_done() == 2);
  PdColumns& pd = prefill.handed(0);
  EXPECT(pd.prefill_instance == 1 && pd.decode_instance == -1 && std::isnan(pd.kv_bytes));
  pd.decode_instance = 0;
  pd.handoff_s = 2.0;
  pd.transfer_end_s = 4.0;
  const SeqRecord added = d.add_sequence(0, 40, 3, 2.0, {}, 0, true);
  d.kv_arrived(0);
  decode.enqueue(added, 4.0, prefill);
  EXPECT_THROWS(prefill.handed(0), std::out_of_range);  // the decode log's now
  EXPECT_THROWS(decode.enqueue(d.add_sequence(2, 8, 3, 4.0), 4.0, prefill),
                std::invalid_argument);  // never handed off
  drain(d, decode, 10.0);
  decode.end();
  const RequestRows& r = decode.requests();
  EXPECT(r.request_id == std::vector<int64_t>{0});
  // the prefill's: enqueue, first schedule, rank
  EXPECT(r.enqueue_s[0] == 0.5 && r.first_scheduled_s[0] == 1.0 && r.first_scheduled_step[0] == 0);
  // the decode's: the first token with the KV, the rest, how it ended
  EXPECT(r.first_token_s[0] == 4.0 && r.last_token_s[0] > 10.0 && r.output_tokens[0] == 3);
  EXPECT(r.status[0] == kEndFinished && r.decode_dp_rank[0] == 0);
  EXPECT(r.prefill_instance[0] == 1 && r.decode_instance[0] == 0 && r.handoff_s[0] == 2.0 &&
         r.transfer_end_s[0] == 4.0 && std::isnan(r.transfer_start_s[0]));
}

TEST(what_no_decode_log_took_in_is_unfinished_between_the_pools) {
  Scheduler p(small_engine(EngineType::kPrompt));
  StepLog prefill(0, Handoffs::kKept, 0);
  prefill_two(p, prefill);
  prefill.handed(1).transfer_start_s = 3.0;
  prefill.end();
  const RequestRows& r = prefill.requests();
  EXPECT((r.request_id == std::vector<int64_t>{0, 1}));
  EXPECT((r.reason == std::vector<std::string>{"awaiting decode room", "in KV transfer"}));
  EXPECT(r.status[0] == kEndUnfinished && r.status[1] == kEndUnfinished);
  EXPECT(r.output_tokens[1] == 0 && std::isnan(r.first_token_s[1]) && r.enqueue_s[1] == 0.5);
  EXPECT(r.decode_dp_rank[1] == -1 && r.decode_instance[1] == -1);
}

TEST(a_prompt_engines_row_log_writes_the_hand_off_code) {
  Scheduler p(small_engine(EngineType::kPrompt));
  StepLog log(0, Handoffs::kRow);
  prefill_two(p, log);
  EXPECT((log.requests().status == std::vector<uint8_t>{kEndHandedOff, kEndHandedOff}));
  EXPECT(log.requests().prefill_instance[0] == 0 && log.requests().decode_instance[0] == 0);
}
