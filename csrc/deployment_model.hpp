// A step of one serving instance spread over devices (engine/deployment.py): per DP rank,
// the roofline of each part on one device of the rank, the routed experts of the hottest
// device (every rank's tokens, top-k routing, times the imbalance), dispatch and combine
// all-to-alls and TP all-reduces. Two micro-batches hide communication under compute;
// one adds them. The step lasts as long as the slowest rank. docs/modeling.md has the
// equations.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "cost_model.hpp"
#include "kernel_step.hpp"
#include "schedule_output.hpp"

namespace steptrace {

// No defaults of its own: every member is filled from a Deployment and a device profile
// (engine/executors/modeled.py, deployment_rates), and DeploymentModel refuses a member
// left at 0 but the latencies, the overhead and the layer floor.
struct DeploymentRates {
  int64_t devices = 0;
  int64_t attention_tp = 0;
  int64_t dense_tp = 0;
  int64_t moe_ep = 0;
  int64_t moe_tp = 0;
  int64_t micro_batches = 0;
  int64_t scaleup_devices = 0;
  double local_experts = 0;  // routed experts per EP group, redundant ones included
  double expert_imbalance = 0;  // the hottest device's expert load over the mean
  double hidden = 0;  // hidden size: the all-to-all and all-reduce payload per token
  double dispatch_bytes = 0;  // per element
  double combine_bytes = 0;
  double layers = 0;  // main model layers (TP all-reduces)
  // effective rates: peak x efficiency, per device
  double attention_flops_per_s = 0;
  double dense_flops_per_s = 0;
  double expert_flops_per_s = 0;
  double hbm_bytes_per_s = 0;
  double scaleup_bytes_per_s = 0;  // one direction, x network efficiency
  double scaleout_bytes_per_s = 0;
  double scaleup_latency_s = 0;  // one collective
  double scaleout_latency_s = 0;
  double overhead_s = 0;  // one step
  // The least time a busy rank's layers take whatever their work (kernel launches and
  // small kernels: the profile's layer_floor_us); 0: no floor
  double layer_floor_s = 0;
  // The parts kernel tables time (docs/modeling.md, "The step from kernel tables"), in
  // place of the rooflines above; null: none
  std::shared_ptr<KernelStep> kernels;
};

// Every rank's StepCost of one step: handed to Python and on to the recorder as one
// object (engine._core.StepCosts), not one Python object per rank.
struct StepCosts {
  std::vector<StepCost> ranks;
};

struct DeploymentStep {
  double seconds = 0;
  StepCosts costs;  // per rank, with its parts' seconds
};

class DeploymentModel {
 public:
  // Throws std::invalid_argument for a degree below 1 or a rate not above 0.
  DeploymentModel(const CostModel& cost, const DeploymentRates& rates);

  // accepted: per rank, drafts accepted per row, or nullptr (none).
  DeploymentStep step(const ScheduleOutput& plan, const std::vector<const int64_t*>& accepted,
                      bool mtp) const;

 private:
  double roofline(double flops, double flops_per_s, double bytes) const;
  // All-to-alls moving `copies` tokens to other devices in all, at `payload` bytes an
  // element, over `calls` collectives.
  double all_to_all(double copies, double payload, double calls) const;
  // One ring all-reduce of `tokens` activations per layer, per micro-batch.
  double all_reduce(double tokens, int64_t group, double layers) const;
  // One rank's parts overlapped (two micro-batches) or added.
  void time_rank(const StepParts& p, double experts_s, double received, double calls,
                 StepCost& c) const;
  // What every rank's parts share in a step: the hottest device's experts (roofline),
  // what a device receives, the all-to-alls' calls, and the kernel tables' counts
  struct Shared {
    double experts_s = 0, received = 0, calls = 0;
    double group_tokens = 0, least_sent = 0, mtp_share = 0;
    bool has_prefill = false;
  };
  Shared shared(double tokens, double moe_tokens, double mtp_tokens, bool has_prefill) const;
  // The parts the kernel tables time, in place of the rooflines'; `sent`: the rank's
  // all-to-all tokens
  void time_kernels(const Batch* batch, const RankCounts& counts, double sent, const Shared& sh,
                    StepCost& c) const;
  double rank_seconds(const StepCost& c) const;

  CostModel cost_;
  DeploymentRates r_;
  const KernelStep* kernels_;  // r_.kernels
  double remote_devices_;  // other devices a token's top-k experts fall on
  double remote_domains_;  // other scale-up domains among them
};

}  // namespace steptrace
