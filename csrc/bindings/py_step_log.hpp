// engine._core.StepLog's object: the StepLog with its chunking and the Python callback that
// takes full chunks (step_log_bindings.cpp binds it; the C++ replay loop records into it).
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <stdexcept>
#include <utility>
#include <vector>

#include "recorder/step_log.hpp"
#include "steady_clock.hpp"

namespace steptrace {

// The Python face: calls on_full() before recording a step once chunk_steps steps are
// buffered, and records the time that took in the step's flush_ns, so that a step's
// recording is one call from Python with no Python frame of its own.
struct PyStepLog : StepLog {
  PyStepLog(int64_t warmup_steps, size_t chunk_steps, pybind11::object on_full,
            Handoffs handoff = Handoffs::kNone, int32_t instance = 0)
      : StepLog(warmup_steps, handoff, instance),
        chunk_steps(chunk_steps),
        on_full(std::move(on_full)) {}
  size_t chunk_steps;
  pybind11::object on_full;
  size_t buffered = 0;  // steps recorded since the step rows were last taken
  std::vector<StepCost> costs;  // scratch, reused across record() calls
  bool recording = false;       // inside record(), which on_full() may leave for Python
};

// Marks a record() call in progress: on_full() runs Python, which may switch threads or
// call back into the log, and a second record() then would share the first one's scratch.
class Recording {
 public:
  explicit Recording(PyStepLog& log) : log_(log) {
    if (log.recording)
      throw std::runtime_error(
          "StepLog.record() called while another record() of this log is running (from "
          "on_full or another thread): a StepLog records one step at a time");
    log.recording = true;
  }
  ~Recording() { log_.recording = false; }
  Recording(const Recording&) = delete;
  Recording& operator=(const Recording&) = delete;

 private:
  PyStepLog& log_;
};

// on_full() when chunk_steps steps are buffered; the time it took, in ns (0 if not called).
inline int64_t flush_if_full(PyStepLog& log) {
  if (log.buffered < log.chunk_steps) return 0;
  const int64_t start = steady_now_ns();
  log.on_full();
  log.buffered = 0;
  return steady_now_ns() - start;
}

}  // namespace steptrace
