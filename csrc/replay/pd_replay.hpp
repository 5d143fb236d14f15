// The replay of a P/D deployment in C++: one discrete-event loop on the virtual clock over
// every instance (docs/disaggregation.md). It mirrors harness/replay/disaggregated.py, the
// reference, event for event: at one instant arrivals first, then transfers ending, then
// hand-offs and KV arrivals (in the order they were queued), then the instance with the
// earliest clock steps (the lower instance on ties); each instance's steps are modeled by its
// own ModeledStep and recorded into its own step log, a request's prefill side handed from
// its prefill instance's log to its decode instance's, which writes its one row. So a seed
// gives the same tables from either loop. A session trace's turns arrive as
// session_turns.hpp releases them, a turn ending with its last token on its decode instance.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <queue>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "kv_links.hpp"
#include "modeled_step.hpp"
#include "recorder/step_log.hpp"
#include "routers.hpp"
#include "scheduler.hpp"
#include "virtual_replay.hpp"

namespace steptrace {

struct PdInstance {
  bool prefill = false;  // a prefill instance (prompt engine), else a decode one (completion)
  int64_t index = 0;     // within its pool
  Scheduler* scheduler = nullptr;
  ModeledStep* step = nullptr;
  StepLog* log = nullptr;
  double clock = 0;      // the start of its next step
  bool stalled = false;  // its last step ran no row: it waits for an event to step again
  // decode: sequences added with their KV in transfer, not yet admitted, in order added
  std::vector<int64_t> pending;
};

struct PdService {
  std::string prefill_router, decode_router;
  int64_t capacity_blocks = 0;  // a prefill instance's KV blocks (the cache-aware record's)
  int32_t block_size = 0;       // the prefill engine's
  double kv_bytes_per_token = 0;
  double layers = 0;  // main and MTP layers: layerwise, the last layer's share
  double sender_bps = 0, receiver_bps = 0;  // one DP rank's link, prefill and decode side
  double latency_s = 0;
  bool layerwise = false;
};

class PdReplay {
 public:
  // hooks.before_record(k): before instances[k]'s step is recorded. A prefill instance's
  // log keeps its hand-offs (Handoffs::kKept); the requests' P/D columns are filled in there.
  PdReplay(std::vector<PdInstance>& instances, const ReplayRequests& requests,
           const PdService& service, ReplayHooks& hooks);
  // Replays to completion or until a progress hook says stop; true if completed.
  bool run(int64_t progress_every);

 private:
  static constexpr double kNever = std::numeric_limits<double>::infinity();
  enum Kind : int { kHandoff = 0, kKvArrived = 1 };  // their order at one instant
  struct Handoff {  // a prefilled sequence on its way to a decode instance
    PdInstance* prefill = nullptr;
    int64_t sender = 0;  // device key of the prefill rank
    double nbytes = 0, asked_s = 0, prefill_end_s = 0;
    double not_before_s = 0;  // the transfer ends no earlier (layerwise: its last layer)
    PdInstance* decode = nullptr;
    SeqRecord added;  // the decode scheduler's record of it as added
  };
  using Event = std::tuple<double, int, int64_t, int64_t>;  // (time, kind, order, seq_id)

  bool advance();  // the next event processed; false when nothing is left to happen
  double next_arrival() const;
  void arrive(double t);
  void arrive(int64_t i, double t);
  void ended(int64_t seq_id, double t);  // a session's turn's last token is out, or rejected
  void step(PdInstance& instance);
  void handed_off(PdInstance& instance, const SeqRecord& left, double t0, double t1);
  void route_decode(int64_t seq_id, double t);
  void start_transfer(int64_t seq_id, double t);
  void transferred(int64_t seq_id, double t);
  void kv_arrived(int64_t seq_id, double t);
  static void wake(PdInstance& instance, double t);

  std::vector<PdInstance>& instances_;
  std::vector<PdInstance*> prefill_, decode_;
  const ReplayRequests& requests_;
  const PdService& service_;
  ReplayHooks& hooks_;
  PrefillRouter prefill_router_;
  DecodeRouter decode_router_;
  KvLinks links_;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  std::unordered_map<int64_t, Handoff> handoffs_;  // by seq_id, hand-off to KV arrival
  ModeledOutput out_;                               // scratch, a step's
  std::vector<int64_t> ids_, hashes_, free_, prompt_lens_;  // scratch
  double now_ = 0;
  int64_t next_ = 0, done_ = 0, steps_ = 0, order_ = 0;
  bool stepped_ = false;
  std::optional<SessionTurns> turns_;  // a session trace's
};

}  // namespace steptrace
