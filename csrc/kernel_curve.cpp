#include "kernel_curve.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace steptrace {

KernelCurve::KernelCurve(std::vector<double> tokens, std::vector<double> contexts,
                         const std::vector<double>& times_us)
    : tokens_(std::move(tokens)), contexts_(std::move(contexts)) {
  if (tokens_.empty() || contexts_.empty() || times_us.size() != tokens_.size() * contexts_.size())
    throw std::invalid_argument(
        "a kernel curve needs tokens x contexts times, got " + std::to_string(times_us.size()) +
        " for " + std::to_string(tokens_.size()) + " x " + std::to_string(contexts_.size()));
  for (size_t i = 0; i < tokens_.size(); ++i)
    if (!(tokens_[i] >= 1) || (i > 0 && !(tokens_[i] > tokens_[i - 1])))
      throw std::invalid_argument("a kernel curve's tokens must ascend from >= 1");
  for (size_t i = 1; i < contexts_.size(); ++i)
    if (!(contexts_[i] > contexts_[i - 1]))
      throw std::invalid_argument("a kernel curve's contexts must ascend");
  for (double t : tokens_) log_tokens_.push_back(std::log(t));
  for (double us : times_us) {
    if (!(us > 0) || !std::isfinite(us))
      throw std::invalid_argument("a kernel curve's times must be finite and > 0");
    log_times_.push_back(std::log(us * 1e-6));
  }
}

double KernelCurve::in_tokens(size_t row, double tokens, bool& outside) const {
  const double* lt = log_times_.data() + row * tokens_.size();
  const size_t n = tokens_.size();
  if (tokens <= tokens_[0]) {
    if (tokens < tokens_[0]) outside = true;
    return std::exp(lt[0]);  // no faster than the smallest shape measured
  }
  if (tokens >= tokens_[n - 1]) {  // past the grid: the last two rows' line, if it rises
    if (tokens > tokens_[n - 1]) outside = true;
    const double last = std::exp(lt[n - 1]);
    const double slope =
        n > 1 ? (last - std::exp(lt[n - 2])) / (tokens_[n - 1] - tokens_[n - 2]) : 0;
    return slope > 0 ? last + slope * (tokens - tokens_[n - 1]) : last * tokens / tokens_[n - 1];
  }
  const size_t i = static_cast<size_t>(std::upper_bound(tokens_.begin(), tokens_.end(), tokens) -
                                       tokens_.begin());
  const double f = (std::log(tokens) - log_tokens_[i - 1]) / (log_tokens_[i] - log_tokens_[i - 1]);
  return std::exp(lt[i - 1] + f * (lt[i] - lt[i - 1]));
}

double KernelCurve::seconds(double tokens, double context, bool& outside) const {
  if (tokens <= 0 || empty()) return 0;
  const size_t m = contexts_.size();
  if (m == 1 || context <= contexts_[0]) {
    if (context != contexts_[0]) outside = true;
    return in_tokens(0, tokens, outside);
  }
  const size_t j =
      std::min(static_cast<size_t>(std::lower_bound(contexts_.begin(), contexts_.end(), context) -
                                   contexts_.begin()),
               m - 1);  // contexts_[j - 1] < context <= contexts_[j], or the last two past the grid
  if (context > contexts_[m - 1]) outside = true;
  const double lo = in_tokens(j - 1, tokens, outside), hi = in_tokens(j, tokens, outside);
  const double f = (context - contexts_[j - 1]) / (contexts_[j] - contexts_[j - 1]);
  return lo + f * (hi - lo);
}

}  // namespace steptrace
