#include "kernel_step.hpp"

#include <stdexcept>
#include <utility>

namespace steptrace {

RankCounts count_rank(const Batch& batch) {
  RankCounts r;
  for (size_t i = 0; i < batch.rows(); ++i) {
    const double q = batch.seqlen_q[i];
    r.tokens += q;
    if (batch.kind[i] == kDecode) {
      r.decode_rows += 1;
      r.decode_tokens += q;
      r.decode_context += batch.seqlen_k[i];
      r.logits += q;
    } else {
      r.prefill_tokens += q;
      r.has_prefill = true;
      if (batch.kind[i] == kFinal) r.logits += 1;
    }
  }
  if (r.decode_rows > 0) r.decode_context /= r.decode_rows;
  return r;
}

KernelStep::KernelStep(std::vector<KernelTerm> terms, int64_t micro_batches,
                       double mtp_layers_per_layer, double decode_layer_scale)
    : terms_(std::move(terms)),
      micro_batches_(static_cast<double>(micro_batches)),
      mtp_layers_(mtp_layers_per_layer),
      decode_layer_scale_(decode_layer_scale) {
  if (micro_batches < 1) throw std::invalid_argument("micro_batches must be >= 1");
  if (!(decode_layer_scale > 0 && decode_layer_scale <= 1))
    throw std::invalid_argument("decode_layer_scale must be in (0, 1]");
  for (const KernelTerm& t : terms_) {
    if (t.curve.empty()) throw std::invalid_argument("a kernel term needs a curve");
    if (!(t.calls > 0)) throw std::invalid_argument("a kernel term's calls must be > 0");
    const int part = static_cast<int>(t.part);
    if (t.when != When::kWithPrefill) timed_[part][0] = true;
    if (t.when != When::kDecodeOnly) timed_[part][1] = true;
  }
}

void KernelStep::add(const Batch* batch, const RankCounts& r, double group_tokens, double sent,
                     bool step_has_prefill, double mtp_share, double* parts, double& aux,
                     uint8_t& extrapolated) const {
  const double mb = micro_batches_;
  const double layer_scale = step_has_prefill ? 1 : decode_layer_scale_;
  for (const KernelTerm& t : terms_) {
    if ((t.when == When::kDecodeOnly && step_has_prefill) ||
        (t.when == When::kWithPrefill && !step_has_prefill))
      continue;
    bool outside = t.substitute;
    double s = 0;
    // Each micro-batch runs its share of the rank's count; a prefill row runs whole in one
    switch (t.quantity) {
      case Quantity::kPrefillRow:
        if (batch != nullptr)
          for (size_t i = 0; i < batch->rows(); ++i)
            if (batch->kind[i] != kDecode)
              s += t.curve.seconds(batch->seqlen_q[i], batch->seqlen_k[i] - batch->seqlen_q[i],
                                   outside);
        break;
      case Quantity::kDecodeRows:
        if (r.decode_rows > 0)
          s = mb * t.curve.seconds(r.decode_rows / mb, r.decode_context, outside);
        break;
      default: {
        double count = 0;
        switch (t.quantity) {
          case Quantity::kTokens: count = r.tokens; break;
          case Quantity::kDecodeTokens: count = r.decode_tokens; break;
          case Quantity::kPrefillTokens: count = r.prefill_tokens; break;
          case Quantity::kLogits: count = r.logits; break;
          case Quantity::kGroupTokens: count = group_tokens; break;
          default: count = sent; break;  // kSentTokens
        }
        if (count > 0) s = mb * t.curve.seconds(count * t.scale / mb, 0, outside);
      }
    }
    if (s == 0) continue;
    const int part = static_cast<int>(t.part);
    s *= t.calls * (t.per_layer ? (1 + mtp_layers_ * mtp_share) * layer_scale : 1);
    parts[part] += s;
    if (t.aux && !step_has_prefill) aux += s;
    if (outside) extrapolated |= static_cast<uint8_t>(1u << part);
  }
}

}  // namespace steptrace
