// The replay loop on the virtual clock for a modeled executor, all in C++. It mirrors the
// Python loop (harness/replay/driver.py with engine/llm_engine.py; a session trace's turns
// as harness/replay/sessions.py releases them), which stays the real
// clock's loop and the reference: the same requests added at the same instants, the same
// schedule / execute / postprocess order (with overlap, step i scheduled and executed before
// step i-1 is post-processed), the clock advanced by the same rounded step, the same rows
// recorded. A seed therefore gives the same tables from either loop; only the host timings
// differ. Python is called back only to hand full chunks on and to report progress.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "modeled_step.hpp"
#include "recorder/step_log.hpp"
#include "scheduler.hpp"
#include "session_turns.hpp"

namespace steptrace {

// The replay's requests, ids 0..n-1, sorted by arrival (harness/replay/driver.py, Requests).
struct ReplayRequests {
  int64_t n = 0;
  const double* arrival_s = nullptr;
  const int64_t* prompt_len = nullptr;
  const int64_t* max_new_tokens = nullptr;
  // Prefix caching: request i's hash ids are hash_ids[hash_offsets[i]:hash_offsets[i + 1]]
  // (both nullptr: none).
  const int64_t* hash_offsets = nullptr;
  const int64_t* hash_ids = nullptr;
  int64_t hash_block_size = 0;
  std::vector<int64_t> hashes(int64_t i) const {  // request i's hash ids
    if (!hash_offsets) return {};
    return {hash_ids + hash_offsets[i], hash_ids + hash_offsets[i + 1]};
  }
  // A closed loop keeps this many in flight (0: open loop, the trace's arrivals); a
  // request arrives when it is released, written to released_s[i].
  int64_t concurrency = 0;
  double* released_s = nullptr;
  // A session trace's turns (sessions.parent set): each arrives as session_turns.hpp
  // releases it, written to released_s[i].
  SessionTree sessions;
};

class ReplayHooks {
 public:
  virtual ~ReplayHooks() = default;
  // Before a step is recorded into the loop's log k (a P/D deployment's instance k; else
  // 0): hand its full chunks on; the time that took in ns (0: none).
  virtual int64_t before_record(size_t log) = 0;
  // Every progress_every recorded steps, and once at the end; false stops the replay.
  virtual bool progress(int64_t done, int64_t n) = 0;
};

class VirtualReplay {
 public:
  VirtualReplay(Scheduler& scheduler, ModeledStep& step, StepLog& log,
                const ReplayRequests& requests, bool overlap, ReplayHooks& hooks);
  // Replays to completion or until a progress hook says stop; true if completed.
  bool run(int64_t progress_every);

 private:
  struct Launched {  // a plan scheduled and executed, not yet post-processed
    std::shared_ptr<ScheduleOutput> plan;
    int64_t start_ns = 0;
    int64_t sched_call_ns = 0;
    ModeledOutput out;
  };

  bool step();  // the requests due added, then a recorded step (true) or an idle wait
  bool due() const;
  bool arrivals_left() const { return turns_ ? !turns_->empty() : next_ < requests_.n; }
  void add_due();
  void add(int64_t i);
  void add_turn(int64_t i, double t);
  void turn_ended(int64_t i);  // turns_ told; the scheduler told of a session that ended
  bool has_unfinished() const { return !scheduler_.is_finished() || inflight_ != nullptr; }
  Launched* launch();
  void record(Launched& done, double t_start);

  Scheduler& scheduler_;
  ModeledStep& step_;
  StepLog& log_;
  const ReplayRequests& requests_;
  const bool overlap_;
  ReplayHooks& hooks_;
  Launched slots_[2];  // overlap alternates between them
  int next_slot_ = 0;
  Launched* inflight_ = nullptr;  // overlap: the plan launched ahead
  double now_ = 0.0;  // seconds since the replay began, on the virtual clock
  int64_t next_ = 0;  // the next request to add
  int64_t steps_ = 0;
  std::optional<SessionTurns> turns_;  // a session trace's
};

}  // namespace steptrace
