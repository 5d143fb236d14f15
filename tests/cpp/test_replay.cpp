// The C++ replay loops without Python (csrc/replay; docs/disaggregation.md, "The replay"):
// small deterministic replays end to end on the virtual clock. Every busy step is modeled
// as 0.25 s (a roofline whose rates never bind: its overhead plus its floor), so the
// expected instants are exact.
#include <memory>
#include <utility>
#include <vector>

#include "harness.hpp"
#include "recorder/step_log.hpp"
#include "replay/modeled_step.hpp"
#include "replay/pd_replay.hpp"
#include "replay/virtual_replay.hpp"
#include "scheduler.hpp"
#include "small_engine.hpp"
#include "tiny_model.hpp"

using namespace steptrace;

namespace {

const CostModel kModel(tiny(), ByteSizes{1.0, 1.0, 2.0, 1.0});
constexpr double kStep = 0.25;

ModeledStep quarter_second_steps() {
  const Roofline roofline{1e30, 1e30, kStep / 2, kStep / 2};
  return ModeledStep(kModel, std::nullopt, roofline, false, 0.0, Pcg64(0, 1, 0, 3));
}

struct Trace {  // what ReplayRequests points into
  std::vector<double> arrival_s;
  std::vector<int64_t> prompt_len, max_new_tokens;
  std::vector<double> released_s;

  ReplayRequests requests(int64_t concurrency = 0) {
    ReplayRequests r;
    r.n = static_cast<int64_t>(arrival_s.size());
    r.arrival_s = arrival_s.data();
    r.prompt_len = prompt_len.data();
    r.max_new_tokens = max_new_tokens.data();
    r.concurrency = concurrency;
    released_s.assign(arrival_s.size(), -1.0);
    r.released_s = released_s.data();
    return r;
  }
};

class Hooks : public ReplayHooks {
 public:
  explicit Hooks(int64_t stop_after = -1) : stop_after_(stop_after) {}
  int64_t before_record(size_t log) override {
    records.push_back(log);
    return 0;
  }
  bool progress(int64_t done, int64_t n) override {
    reports.emplace_back(done, n);
    return stop_after_ < 0 || static_cast<int64_t>(records.size()) < stop_after_;
  }
  std::vector<size_t> records;                       // the log of each recorded step
  std::vector<std::pair<int64_t, int64_t>> reports;  // (done, n)

 private:
  int64_t stop_after_;
};

}  // namespace

// Request 0 arrives at 0 and takes three steps; the engine then idles until request 1
// arrives at 2.0, whose first step starts then.
TEST(virtual_replay_steps_by_the_model_and_idles_to_the_next_arrival) {
  Scheduler s(small_engine(EngineType::kNormal));
  ModeledStep step = quarter_second_steps();
  StepLog log(0);
  Trace trace{{0.0, 2.0}, {8, 8}, {3, 2}, {}};
  const ReplayRequests requests = trace.requests();
  Hooks hooks;
  VirtualReplay replay(s, step, log, requests, false, hooks);
  EXPECT(replay.run(64));

  EXPECT((log.steps().t_start_s == std::vector<double>{0.0, 0.25, 0.5, 2.0, 2.25}));
  EXPECT((log.steps().t_end_s == std::vector<double>{0.25, 0.5, 0.75, 2.25, 2.5}));
  EXPECT((log.steps().prompt_phase == std::vector<uint8_t>{1, 0, 0, 1, 0}));
  const RequestRows& r = log.requests();
  EXPECT((r.request_id == std::vector<int64_t>{0, 1}));
  EXPECT((r.enqueue_s == std::vector<double>{0.0, 2.0}));
  EXPECT((r.first_token_s == std::vector<double>{0.25, 2.25}));
  EXPECT((r.last_token_s == std::vector<double>{0.75, 2.5}));
  EXPECT((r.output_tokens == std::vector<int64_t>{3, 2}));
  EXPECT((hooks.records == std::vector<size_t>(5, 0)));
  EXPECT((hooks.reports == std::vector<std::pair<int64_t, int64_t>>{{2, 2}}));
}

// A closed loop of one: request 1 is released, and enqueued, as request 0 finishes.
TEST(virtual_replay_closed_loop_releases_a_request_as_one_finishes) {
  Scheduler s(small_engine(EngineType::kNormal));
  ModeledStep step = quarter_second_steps();
  StepLog log(0);
  Trace trace{{0.0, 0.0}, {8, 8}, {2, 2}, {}};
  const ReplayRequests requests = trace.requests(1);
  Hooks hooks;
  VirtualReplay replay(s, step, log, requests, false, hooks);
  EXPECT(replay.run(64));
  EXPECT((trace.released_s == std::vector<double>{0.0, 0.5}));
  EXPECT((log.requests().enqueue_s == std::vector<double>{0.0, 0.5}));
  EXPECT((log.requests().last_token_s == std::vector<double>{0.5, 1.0}));
}

// With overlap, step i is planned before step i - 1 is post-processed; the tokens still
// come at the ends of the steps that computed them.
TEST(virtual_replay_with_overlap_gives_the_tokens_at_the_same_instants) {
  Scheduler s(small_engine(EngineType::kNormal));
  ModeledStep step = quarter_second_steps();
  StepLog log(0);
  Trace trace{{0.0}, {8}, {3}, {}};
  const ReplayRequests requests = trace.requests();
  Hooks hooks;
  VirtualReplay replay(s, step, log, requests, true, hooks);
  EXPECT(replay.run(64));
  EXPECT(log.requests().output_tokens == std::vector<int64_t>{3});
  EXPECT(log.requests().first_token_s == std::vector<double>{0.25});
  EXPECT(log.requests().last_token_s == std::vector<double>{0.75});
}

// A session: turn 0 (at 1.0) fans out to sub-agent turn 1 (0.5 s after it ends); its next
// turn 2 comes 0.25 s after the sub-agent's subtree has ended.
TEST(virtual_replay_releases_a_sessions_turns_as_their_parents_end) {
  Scheduler s(small_engine(EngineType::kNormal));
  ModeledStep step = quarter_second_steps();
  StepLog log(0);
  Trace trace{{1.0, 0.0, 0.0}, {8, 8, 8}, {2, 1, 2}, {}};
  const std::vector<int64_t> parent{-1, 0, 0}, session{7, 7, 7};
  const std::vector<double> gap{0.0, 0.5, 0.25};
  const std::vector<uint8_t> subagent{0, 1, 0};
  ReplayRequests requests = trace.requests();
  requests.sessions = SessionTree{parent.data(), gap.data(), subagent.data(), session.data(), 0};
  Hooks hooks;
  VirtualReplay replay(s, step, log, requests, false, hooks);
  EXPECT(replay.run(64));
  EXPECT((trace.released_s == std::vector<double>{1.0, 2.0, 2.5}));
  const RequestRows& r = log.requests();
  EXPECT((r.request_id == std::vector<int64_t>{0, 1, 2}));
  EXPECT((r.enqueue_s == std::vector<double>{1.0, 2.0, 2.5}));
  EXPECT((r.last_token_s == std::vector<double>{1.5, 2.25, 3.0}));
}

TEST(virtual_replay_stops_when_progress_says_so) {
  Scheduler s(small_engine(EngineType::kNormal));
  ModeledStep step = quarter_second_steps();
  StepLog log(0);
  Trace trace{{0.0}, {8}, {10}, {}};
  const ReplayRequests requests = trace.requests();
  Hooks hooks(2);
  VirtualReplay replay(s, step, log, requests, false, hooks);
  EXPECT(!replay.run(1));
  EXPECT(hooks.records.size() == 2 && log.num_done() == 0);
}

// One prefill instance, one decode instance, one request of 8 tokens whose KV is 8,192
// bytes (1,024 a token) over a 32,768 B/s sender and a 65,536 B/s receiver: 0.25 s, then
// 0.25 s of latency.
TEST(pd_replay_hands_off_moves_the_kv_and_decodes) {
  Scheduler prefill_scheduler(small_engine(EngineType::kPrompt));
  Scheduler decode_scheduler(small_engine(EngineType::kCompletion));
  ModeledStep prefill_step = quarter_second_steps(), decode_step = quarter_second_steps();
  StepLog prefill_log(0, Handoffs::kKept, 0), decode_log(0);
  std::vector<PdInstance> instances(2);
  instances[0].prefill = true;
  instances[0].scheduler = &prefill_scheduler;
  instances[0].step = &prefill_step;
  instances[0].log = &prefill_log;
  instances[1].scheduler = &decode_scheduler;
  instances[1].step = &decode_step;
  instances[1].log = &decode_log;
  PdService service;
  service.prefill_router = "round_robin";
  service.decode_router = "least_kv";
  service.capacity_blocks = 64;
  service.block_size = 16;
  service.kv_bytes_per_token = 1024;
  service.layers = 2;
  service.sender_bps = 32768;
  service.receiver_bps = 65536;
  service.latency_s = 0.25;
  Trace trace{{0.0}, {8}, {3}, {}};
  const ReplayRequests requests = trace.requests();
  Hooks hooks;
  PdReplay replay(instances, requests, service, hooks);
  EXPECT(replay.run(64));

  // Prefilled in [0, 0.25]; the decode instance reserves its blocks at once (a pass that
  // runs nothing, not a step), the KV moves in [0.25, 0.5] and arrives at 0.75. The one
  // row is the decode instance's, the P/D columns in it; the prefill instance writes none.
  const RequestRows& r = decode_log.requests();
  EXPECT((r.prefill_instance == std::vector<int32_t>{0}));
  EXPECT((r.decode_instance == std::vector<int32_t>{0}));
  EXPECT((r.kv_bytes == std::vector<double>{8192}));
  EXPECT((r.handoff_s == std::vector<double>{0.25}));
  EXPECT((r.transfer_start_s == std::vector<double>{0.25}));
  EXPECT((r.decode_wait_s == std::vector<double>{0.0}));
  EXPECT((r.transfer_end_s == std::vector<double>{0.75}));
  EXPECT(prefill_log.requests().request_id.empty());
  EXPECT((prefill_log.steps().t_end_s == std::vector<double>{0.25}));
  // The decode instance's step 0 was the reservation: its recorded steps are 1 and 2.
  EXPECT((decode_log.steps().step == std::vector<int64_t>{1, 2}));
  EXPECT((decode_log.steps().t_start_s == std::vector<double>{0.75, 1.0}));
  EXPECT((r.first_token_s == std::vector<double>{0.75}));  // the first token comes with the KV
  EXPECT((r.last_token_s == std::vector<double>{1.25}));
  EXPECT((r.output_tokens == std::vector<int64_t>{3}));
  EXPECT((hooks.records == std::vector<size_t>{0, 1, 1}));
  EXPECT((hooks.reports == std::vector<std::pair<int64_t, int64_t>>{{1, 1}}));
}
