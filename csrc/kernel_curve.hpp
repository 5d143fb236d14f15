// One curve of a kernel table (engine/kernels/table.py): what one call of a kernel takes
// on one device, measured on a grid of tokens x contexts, looked up by the rule that
// engine/kernels/lookup.py states (log-log in tokens, linear in context, and what lies
// outside the grid). tests/test_kernel_tables.py holds the two to each other.
#pragma once

#include <cstddef>
#include <vector>

namespace steptrace {

class KernelCurve {
 public:
  KernelCurve() = default;  // empty: times nothing
  // tokens ascending (>= 1), contexts ascending, times_us row-major [context][tokens] (> 0).
  // Throws std::invalid_argument otherwise.
  KernelCurve(std::vector<double> tokens, std::vector<double> contexts,
              const std::vector<double>& times_us);

  bool empty() const { return tokens_.empty(); }
  // Seconds of one call at (tokens, context); `outside` set where that lies outside the
  // grid (left alone otherwise). 0 tokens take no time.
  double seconds(double tokens, double context, bool& outside) const;

 private:
  double in_tokens(size_t row, double tokens, bool& outside) const;

  std::vector<double> tokens_, log_tokens_, contexts_;
  std::vector<double> log_times_;  // log(seconds), [context][tokens]
};

}  // namespace steptrace
