#include "deployment_model.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace steptrace {
namespace {

constexpr double kActivationBytes = 2;  // TP all-reduces move BF16 activations

void check_positive(const char* name, double value) {
  if (!(value > 0))
    throw std::invalid_argument(std::string("deployment ") + name + " must be > 0, got " +
                                std::to_string(value));
}

}  // namespace

DeploymentModel::DeploymentModel(const CostModel& cost, const DeploymentRates& rates)
    : cost_(cost), r_(rates), kernels_(rates.kernels.get()) {
  for (const auto& [name, value] : {std::pair<const char*, double>{"devices", rates.devices},
                                    {"attention_tp", rates.attention_tp},
                                    {"dense_tp", rates.dense_tp},
                                    {"moe_ep", rates.moe_ep},
                                    {"moe_tp", rates.moe_tp},
                                    {"micro_batches", rates.micro_batches},
                                    {"scaleup_devices", rates.scaleup_devices},
                                    {"local_experts", rates.local_experts},
                                    {"expert_imbalance", rates.expert_imbalance},
                                    {"hidden", rates.hidden},
                                    {"dispatch_bytes", rates.dispatch_bytes},
                                    {"combine_bytes", rates.combine_bytes},
                                    {"layers", rates.layers},
                                    {"attention_flops_per_s", rates.attention_flops_per_s},
                                    {"dense_flops_per_s", rates.dense_flops_per_s},
                                    {"expert_flops_per_s", rates.expert_flops_per_s},
                                    {"hbm_bytes_per_s", rates.hbm_bytes_per_s},
                                    {"scaleup_bytes_per_s", rates.scaleup_bytes_per_s},
                                    {"scaleout_bytes_per_s", rates.scaleout_bytes_per_s}})
    check_positive(name, value);
  // A token's top-k experts fall on the EP group's devices uniformly: it is sent once to
  // each other device holding one of them, and crosses scale-out once per other scale-up
  // domain among those (DeepEP forwards within the domain, as DeepSeek-V3 routes).
  const double ep = static_cast<double>(r_.moe_ep), k = static_cast<double>(cost_.top_k());
  const double domains = std::ceil(ep / static_cast<double>(r_.scaleup_devices));
  remote_devices_ = (ep - 1) * -std::expm1(k * std::log1p(-1 / ep));
  remote_domains_ = domains > 1 ? (domains - 1) * -std::expm1(k * std::log1p(-1 / domains)) : 0;
}

double DeploymentModel::roofline(double flops, double flops_per_s, double bytes) const {
  return std::max(flops / flops_per_s, bytes / r_.hbm_bytes_per_s);
}

double DeploymentModel::all_to_all(double copies, double payload, double calls) const {
  if (copies == 0) return 0;
  const double bytes = copies * r_.hidden * payload;
  const double scaleout = bytes * remote_domains_ / remote_devices_;
  return calls * (remote_domains_ > 0 ? r_.scaleout_latency_s : r_.scaleup_latency_s) +
         std::max(bytes / r_.scaleup_bytes_per_s, scaleout / r_.scaleout_bytes_per_s);
}

double DeploymentModel::all_reduce(double tokens, int64_t group, double layers) const {
  if (group <= 1 || tokens == 0) return 0;
  const double g = static_cast<double>(group);  // ring: 2 (g - 1) / g of the data each way
  return layers *
         (static_cast<double>(r_.micro_batches) * r_.scaleup_latency_s +
          2 * (g - 1) / g * tokens * r_.hidden * kActivationBytes / r_.scaleup_bytes_per_s);
}

double DeploymentModel::rank_seconds(const StepCost& c) const {
  const double compute = c.attention_s + c.dense_s + c.experts_s;
  const double comm = c.dispatch_s + c.combine_s + c.allreduce_s;
  // The second stream's work hides under the routed path: the experts, and with one
  // micro-batch the all-to-alls around them (with two, those overlap compute already)
  if (r_.micro_batches > 1) return std::max(compute - std::min(c.aux_s, c.experts_s), comm);
  return compute + comm - std::min(c.aux_s, c.experts_s + c.dispatch_s + c.combine_s);
}

DeploymentStep DeploymentModel::step(const ScheduleOutput& plan,
                                     const std::vector<const int64_t*>& accepted, bool mtp) const {
  const size_t ranks = plan.batches.size();
  DeploymentStep out;
  out.costs.ranks.resize(ranks);  // an idle rank's FLOPs and bytes are all zero
  std::vector<std::pair<size_t, StepParts>> busy;  // the ranks with a batch
  std::vector<RankCounts> counts;  // theirs, where kernel tables time the step
  double tokens = 0, moe_tokens = 0, mtp_tokens = 0;
  bool has_prefill = false;
  for (size_t i = 0; i < ranks; ++i) {
    const Batch& batch = plan.batches[i];
    if (batch.empty()) continue;
    busy.emplace_back(i, cost_.parts(batch, i < accepted.size() ? accepted[i] : nullptr, mtp));
    const StepParts& p = busy.back().second;
    out.costs.ranks[i] = p.cost;
    tokens += p.tokens;
    moe_tokens += p.moe_tokens;
    mtp_tokens += p.mtp_tokens;
    if (kernels_) {
      counts.push_back(count_rank(batch));
      has_prefill = has_prefill || counts.back().has_prefill;
    }
  }
  if (moe_tokens == 0 && tokens == 0) return out;  // nothing ran: every device idles
  const Shared sh = shared(tokens, moe_tokens, mtp_tokens, has_prefill);

  double slowest = 0;
  if (busy.size() < ranks) {
    // An idle rank's devices still run their share of the experts and wait in every
    // all-to-all: the same parts on every idle rank, worked out once.
    StepCost idle;
    idle.experts_s = sh.experts_s;
    idle.dispatch_s = all_to_all(sh.received, r_.dispatch_bytes, sh.calls);
    idle.combine_s = all_to_all(sh.received, r_.combine_bytes, sh.calls);
    if (kernels_) time_kernels(nullptr, RankCounts{}, sh.least_sent, sh, idle);
    idle.rank_s = rank_seconds(idle);
    for (size_t i = 0; i < ranks; ++i)
      if (plan.batches[i].empty()) out.costs.ranks[i] = idle;
    slowest = idle.rank_s;
  }
  const double tp = static_cast<double>(r_.attention_tp);
  for (size_t b = 0; b < busy.size(); ++b) {
    const auto& [i, p] = busy[b];
    StepCost& c = out.costs.ranks[i];
    time_rank(p, sh.experts_s, sh.received, sh.calls, c);
    if (kernels_)
      time_kernels(&plan.batches[i], counts[b], std::max(counts[b].tokens / tp, sh.least_sent), sh,
                   c);
    c.rank_s = std::max(rank_seconds(c), r_.layers * r_.layer_floor_s);
    slowest = std::max(slowest, c.rank_s);
  }
  out.seconds = r_.overhead_s + slowest;
  return out;
}

DeploymentModel::Shared DeploymentModel::shared(double tokens, double moe_tokens, double mtp_tokens,
                                                bool has_prefill) const {
  const double mb = static_cast<double>(r_.micro_batches), k = cost_.top_k();
  const double ep = static_cast<double>(r_.moe_ep), devices = static_cast<double>(r_.devices);
  Shared sh;
  // The hottest device: its share of every rank's routed tokens, times the imbalance
  const double layers = tokens > 0 ? moe_tokens / tokens : 0;  // MoE layers a token crosses
  const double routed = moe_tokens * k / ep * r_.expert_imbalance;
  const double per_layer = tokens * k / ep * r_.expert_imbalance / mb;  // one micro-batch
  const double touched = r_.local_experts * -std::expm1(-per_layer / r_.local_experts);
  sh.experts_s = roofline(routed * cost_.expert_flops() / r_.moe_tp, r_.expert_flops_per_s,
                          mb * layers * touched * cost_.expert_bytes() / r_.moe_tp);
  sh.received = moe_tokens * remote_devices_ / devices * r_.expert_imbalance;
  sh.calls = mb * layers;
  // Kernel tables: the EP group's routed tokens a layer (the hottest device's share as the
  // imbalance says), a device's all-to-all tokens at the least (what it receives)
  sh.group_tokens = tokens * r_.expert_imbalance;
  sh.least_sent = tokens / devices * r_.expert_imbalance;
  sh.mtp_share = tokens > 0 ? mtp_tokens / tokens : 0;
  sh.has_prefill = has_prefill;
  return sh;
}

// A busy rank's parts: its attention and dense work, the step's experts on its devices,
// its all-to-alls (what it sends, or what it receives if more) and all-reduces.
void DeploymentModel::time_rank(const StepParts& p, double experts_s, double received, double calls,
                                StepCost& c) const {
  const double mb = static_cast<double>(r_.micro_batches);
  const double tp = static_cast<double>(r_.attention_tp);
  c.attention_s = roofline(p.attention_flops / tp, r_.attention_flops_per_s,
                           mb * p.attention_bytes / tp + p.kv_bytes);
  c.dense_s = roofline(p.dense_flops / tp, r_.dense_flops_per_s,
                       mb * p.dense_bytes / static_cast<double>(r_.dense_tp));
  c.experts_s = experts_s;
  const double copies = std::max(p.moe_tokens / tp * remote_devices_, received);
  c.dispatch_s = all_to_all(copies, r_.dispatch_bytes, calls);
  c.combine_s = all_to_all(copies, r_.combine_bytes, calls);
  const double rank_tokens = p.tokens + p.mtp_tokens;
  const double reduces = r_.layers + (p.mtp_tokens > 0 ? 1 : 0);  // one per layer
  c.allreduce_s = all_reduce(rank_tokens, r_.attention_tp, reduces) +
                  all_reduce(rank_tokens, r_.dense_tp, reduces);
}

void DeploymentModel::time_kernels(const Batch* batch, const RankCounts& counts, double sent,
                                   const Shared& sh, StepCost& c) const {
  double parts[kNumParts] = {};
  kernels_->add(batch, counts, sh.group_tokens, sent, sh.has_prefill, sh.mtp_share, parts, c.aux_s,
                c.extrapolated);
  double* members[kNumParts] = {&c.attention_s, &c.dense_s,   &c.experts_s,
                                &c.dispatch_s,  &c.combine_s, &c.allreduce_s};
  for (int part = 0; part < kNumParts; ++part)
    if (kernels_->times(static_cast<Part>(part), sh.has_prefill)) *members[part] = parts[part];
}

}  // namespace steptrace
