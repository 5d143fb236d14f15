// engine._core.Scheduler's object: the core scheduler and its mutex (scheduler_bindings.cpp
// binds it; the C++ replay loop, replay_bindings.cpp, holds the mutex as it runs).
#pragma once

#include <mutex>

#include "scheduler.hpp"

namespace steptrace {

// A Scheduler and the mutex that serialises calls into it. schedule() plans with the GIL
// released, so without it a second thread could enter the scheduler while it plans (and
// corrupt the heap). Arguments are converted before the lock is taken, results after it is
// let go: nothing under the lock calls back into Python (the C++ replay loop
// lets it go around each of its calls into Python).
struct GuardedScheduler {
  GuardedScheduler(const SchedulerConfig& config, bool retain_finished)
      : core(config, retain_finished) {}
  Scheduler core;
  std::mutex mutex;
};

}  // namespace steptrace
