// A deployment's step parts timed from kernel tables (docs/modeling.md, "The step from
// kernel tables"): each term is one kernel's curve, looked up at a count the rank's batch
// gives (its tokens, its decode rows at their mean context, each prefill row at its cached
// prefix, the EP group's routed tokens, ...) and called `calls` times a step. The terms
// are chosen once per deployment (engine/kernels/step.py); a step only looks them up.
#pragma once

#include <cstdint>
#include <vector>

#include "kernel_curve.hpp"
#include "schedule_output.hpp"

namespace steptrace {

// What a term's tokens count on one rank
enum class Quantity : int8_t {
  kTokens,         // positions the rank computes (every row's q)
  kDecodeRows,     // decode rows, at their mean seqlen_k as the context
  kDecodeTokens,   // positions of decode rows
  kPrefillRow,     // each prefill row alone: its q, at its cached prefix (k - q)
  kPrefillTokens,  // positions of prefill rows
  kLogits,         // positions whose logits are computed (decode rows, final chunks)
  kGroupTokens,    // tokens the EP group routes: every rank's, times the imbalance
  kSentTokens,     // the all-to-all's tokens per rank: its own, or the mean times the
                   // imbalance where more (what an idle rank's devices receive)
};

// The StepCost member a term adds to, and its bit in StepCost::extrapolated
enum class Part : int8_t { kAttention, kDense, kExperts, kDispatch, kCombine, kAllReduce };
constexpr int kNumParts = 6;

// Which steps a term times: the all-to-alls' low-latency kernels serve decode-only steps,
// the normal ones steps with a prefill row (as SGLang's DeepEP `auto` mode picks them)
enum class When : int8_t { kAlways, kDecodeOnly, kWithPrefill };

struct KernelTerm {
  KernelCurve curve;
  Quantity quantity = Quantity::kTokens;
  Part part = Part::kAttention;
  When when = When::kAlways;
  double calls = 1;  // a step, in the main model: layers x calls a layer
  bool per_layer = true;  // the MTP module runs it once more, at its share of the tokens
  // A curve of another shape standing in for one the table lacks (another EP width): the
  // count is scaled to the shape's load, and every lookup is flagged as extrapolated
  double scale = 1;
  bool substitute = false;
  // Run on a second stream beside the routed experts' path in a decode-only step, where the
  // stack does so (TensorRT-LLM's shared experts under CUDA graphs): DeploymentModel hides
  // what the path covers
  bool aux = false;
};

// One rank's counts, from its batch
struct RankCounts {
  double tokens = 0, decode_rows = 0, decode_tokens = 0, decode_context = 0;
  double prefill_tokens = 0, logits = 0;
  bool has_prefill = false;
};
RankCounts count_rank(const Batch& batch);

class KernelStep {
 public:
  // decode_layer_scale: each per-layer term's time in a decode-only step, over its table's
  // (a stack's programmatic dependent launch overlapping each kernel's prologue; 1 = none)
  KernelStep(std::vector<KernelTerm> terms, int64_t micro_batches, double mtp_layers_per_layer,
             double decode_layer_scale = 1);

  // Whether some term times `part` in a step with (or without) a prefill row; a part no
  // term times is timed as without tables (DeploymentModel)
  bool times(Part part, bool with_prefill) const {
    return timed_[static_cast<int>(part)][with_prefill ? 1 : 0];
  }
  // Adds each term's seconds to `parts` (indexed by Part) and sets `extrapolated` bits;
  // `aux`: the seconds of `parts` that ran on the second stream (decode-only steps).
  // group_tokens: the EP group's routed tokens this step; sent: this rank's all-to-all
  // tokens; mtp_share: MTP positions over main-model positions (0 without MTP).
  void add(const Batch* batch, const RankCounts& r, double group_tokens, double sent,
           bool step_has_prefill, double mtp_share, double* parts, double& aux,
           uint8_t& extrapolated) const;

 private:
  std::vector<KernelTerm> terms_;
  double micro_batches_;
  double mtp_layers_;  // MTP module layers per main-model layer: per_layer terms' extra share
  double decode_layer_scale_;
  bool timed_[kNumParts][2] = {};
};

}  // namespace steptrace
