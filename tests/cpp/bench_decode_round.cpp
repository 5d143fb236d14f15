// tests/bench/test_decode_round.py's N = 1,024 round from C++ alone (no Python): for
// profiling, e.g. valgrind --tool=callgrind. Prints the median schedule() and
// postprocess() times over 500 rounds. A third argument `mixed` runs the same rounds as
// mixed rounds (mixed_batches, docs/scheduling.md rule 9.15): decode rows only, the token
// budget never reached.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "scheduler.hpp"

using namespace steptrace;

namespace {

double now_us() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int32_t n = argc > 1 ? std::atoi(argv[1]) : 1024;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 500;
  const bool mixed = argc > 3 && std::string(argv[3]) == "mixed";
  SchedulerConfig cfg;
  cfg.max_num_batched_tokens = 1024 * n;
  cfg.max_num_seqs = n;
  cfg.num_kv_blocks = 64 * n;
  cfg.block_size = 64;
  cfg.mixed_batches = mixed;
  Scheduler s(cfg);
  for (int32_t i = 0; i < n; ++i) s.add_sequence(i, 1024, 100000, 0.0);
  for (int i = 0; i < 2; ++i) s.postprocess(*s.schedule(), nullptr);  // prefill, warm-up
  std::vector<double> sched, post;
  for (int i = 0; i < rounds; ++i) {
    const double t0 = now_us();
    auto plan = s.schedule();
    const double t1 = now_us();
    s.postprocess(*plan, nullptr);
    const double t2 = now_us();
    sched.push_back(t1 - t0);
    post.push_back(t2 - t1);
  }
  std::printf("%s n %d: schedule %.2f us, postprocess %.2f us (medians of %d rounds)\n",
              mixed ? "mixed" : "decode", n, median(sched), median(post), rounds);
}
