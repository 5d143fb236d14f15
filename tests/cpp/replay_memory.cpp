// Peak RSS of the scheduler alone over a long generated replay (no Python, no engine):
// schedule/postprocess rounds, a fixed arrival rate, every request eventually finishing.
// Usage: replay_memory REQUESTS [retain]   (retain: keep finished sequences, the default
// of Scheduler; without it they are released, retain_finished = false).
#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "scheduler.hpp"

using namespace steptrace;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s REQUESTS [retain]\n", argv[0]);
    return 2;
  }
  const int64_t requests = std::atoll(argv[1]);
  const bool retain = argc > 2 && std::strcmp(argv[2], "retain") == 0;
  SchedulerConfig cfg;  // defaults: budget 8192, 256 sequences, 4096 blocks of 16
  cfg.overlap = true;
  Scheduler s(cfg, retain);
  uint64_t rng = 12345;  // a 64-bit LCG: the same requests every run
  auto next = [&rng](int64_t below) {
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<int64_t>((rng >> 33) % static_cast<uint64_t>(below));
  };
  int64_t added = 0, steps = 0;
  size_t most_live = 0;
  std::shared_ptr<ScheduleOutput> inflight;
  while (added < requests || !s.is_finished() || inflight) {
    if (added < requests && steps % 2 == 0)  // one request every other step
      s.add_sequence(added++, 1 + next(1024), 1 + next(256), static_cast<double>(steps));
    std::shared_ptr<ScheduleOutput> plan;
    if (added < requests || !s.is_finished()) plan = s.schedule();
    if (inflight) s.postprocess(*inflight, nullptr);
    inflight = plan;
    most_live = std::max(most_live, s.num_live());
    ++steps;
  }
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  std::printf(
      "requests %lld retain_finished %d steps %lld most_live %zu slots %zu peak_rss_mb %.1f\n",
      static_cast<long long>(requests), retain ? 1 : 0, static_cast<long long>(steps), most_live,
      s.num_sequences(), usage.ru_maxrss / 1024.0);
}
