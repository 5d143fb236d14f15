// The modeled executor's step (engine/executors/modeled.py documents the model): MTP drafts
// accepted from the seeded stream, then the deployment model's step, or without a
// deployment each rank's roofline, the step as long as the slowest rank; then the host KV
// tier's reloads (a rank's reloaded blocks times the seconds one takes over the host link,
// the most of any rank), serial with the step's compute. The Python loop
// calls it through engine._core.ModeledStep and the C++ loop (virtual_replay.hpp) directly,
// so both replay one model.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "cost_model.hpp"
#include "deployment_model.hpp"
#include "pcg64.hpp"
#include "schedule_output.hpp"

namespace steptrace {

struct Roofline {  // a device profile's effective rates, for a run without a deployment
  double flops_per_s = 0;
  double bytes_per_s = 0;
  double overhead_s = 0;  // one step
  double floor_s = 0;     // the least a busy rank's layers take; 0: none
};

struct ModeledOutput {
  double seconds = 0;
  StepCosts costs;  // per rank
  // Drafts accepted per row, per rank, and the same rows flat (rank-then-batch order, as
  // postprocess() reads them); both empty without MTP.
  std::vector<std::vector<int64_t>> accepted;
  std::vector<int64_t> flat_accepted;
};

class ModeledStep {
 public:
  // acceptance: each draft's probability of acceptance (read only with mtp).
  // reload_s_per_block: one KV block's bytes on a device over its host link bandwidth.
  ModeledStep(const CostModel& cost, std::optional<DeploymentRates> deployment,
              const Roofline& roofline, bool mtp, double acceptance, const Pcg64& rng,
              double reload_s_per_block = 0.0);

  // The plan's step, into `out` (its buffers reused from step to step).
  void execute(const ScheduleOutput& plan, ModeledOutput& out);
  bool mtp() const { return mtp_; }

 private:
  void accept(const Batch& b, std::vector<int64_t>& accepted);
  double rank_seconds(const StepCost& c) const;
  double reload_seconds(const ScheduleOutput& plan) const;

  CostModel cost_;
  std::optional<DeploymentModel> deployment_;
  Roofline roofline_;
  bool mtp_;
  double acceptance_;
  double reload_s_per_block_;
  Pcg64 rng_;
  std::vector<const int64_t*> rows_;  // scratch: the deployment model's per-rank drafts
};

}  // namespace steptrace
