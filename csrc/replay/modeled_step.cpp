#include "modeled_step.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace steptrace {

ModeledStep::ModeledStep(const CostModel& cost, std::optional<DeploymentRates> deployment,
                         const Roofline& roofline, bool mtp, double acceptance, const Pcg64& rng,
                         double reload_s_per_block)
    : cost_(cost),
      roofline_(roofline),
      mtp_(mtp),
      acceptance_(acceptance),
      reload_s_per_block_(reload_s_per_block),
      rng_(rng) {
  if (deployment) deployment_.emplace(cost_, *deployment);
  if (!deployment && (roofline.flops_per_s <= 0 || roofline.bytes_per_s <= 0))
    throw std::invalid_argument("a roofline needs flops_per_s and bytes_per_s above 0");
  if (!(reload_s_per_block >= 0))
    throw std::invalid_argument("reload_s_per_block must be >= 0, got " +
                                std::to_string(reload_s_per_block));
}

void ModeledStep::execute(const ScheduleOutput& plan, ModeledOutput& out) {
  const size_t ranks = plan.batches.size();
  out.accepted.resize(mtp_ ? ranks : 0);
  out.flat_accepted.clear();
  for (size_t r = 0; r < out.accepted.size(); ++r) {
    accept(plan.batches[r], out.accepted[r]);
    out.flat_accepted.insert(out.flat_accepted.end(), out.accepted[r].begin(),
                             out.accepted[r].end());
  }
  if (deployment_) {
    rows_.clear();
    for (const auto& a : out.accepted) rows_.push_back(a.data());
    DeploymentStep s = deployment_->step(plan, rows_, mtp_);
    out.seconds = s.seconds + reload_seconds(plan);
    out.costs = std::move(s.costs);
    return;
  }
  out.costs.ranks.resize(ranks);
  double slowest = 0;
  for (size_t r = 0; r < ranks; ++r) {
    StepCost& c = out.costs.ranks[r];
    c = cost_.batch(plan.batches[r], mtp_ ? out.accepted[r].data() : nullptr, mtp_);
    c.rank_s = rank_seconds(c);
    slowest = std::max(slowest, c.rank_s);
  }
  // idle ranks move no byte
  out.seconds = (slowest > 0 ? roofline_.overhead_s + slowest : 0.0) + reload_seconds(plan);
}

double ModeledStep::reload_seconds(const ScheduleOutput& plan) const {
  int32_t most = 0;
  for (const Batch& b : plan.batches) most = std::max(most, b.num_reloaded_blocks);
  return most * reload_s_per_block_;
}

// Leading drafts accepted, each with probability acceptance_: a row of draws per row, as
// many as the batch's most drafts (none drawn when no row has a draft).
void ModeledStep::accept(const Batch& b, std::vector<int64_t>& accepted) {
  const size_t n = b.rows();
  accepted.assign(n, 0);
  int32_t most = 0;
  for (size_t i = 0; i < n; ++i)
    if (b.kind[i] == kDecode) most = std::max(most, b.seqlen_q[i] - 1);
  if (most == 0) return;
  for (size_t i = 0; i < n; ++i) {
    const int32_t drafts = b.kind[i] == kDecode ? b.seqlen_q[i] - 1 : 0;
    int32_t leading = 0;
    bool hit = true;
    for (int32_t j = 0; j < most; ++j) {  // every draw is taken, as numpy's matrix takes it
      const bool accepted_draft = rng_.uniform() < acceptance_;
      hit = hit && accepted_draft;
      leading += hit;
    }
    accepted[i] = std::min(leading, drafts);
  }
}

// A rank's own step without the overhead, at least its layers' floor; 0 for a rank that
// moves no byte.
double ModeledStep::rank_seconds(const StepCost& c) const {
  if (c.bytes == 0) return 0.0;
  return std::max({c.executed_flops / roofline_.flops_per_s, c.bytes / roofline_.bytes_per_s,
                   roofline_.floor_s});
}

}  // namespace steptrace
