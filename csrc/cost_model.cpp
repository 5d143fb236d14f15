#include "cost_model.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>
#include <string>

namespace steptrace {
namespace {

constexpr int64_t kCsaRatio = 4;  // the only ratio with an indexer (and overlapping windows)
constexpr int64_t kHcaRatio = 128;

// Sums over the positions p = k - q + 1 .. k of a row's queries, as differences of sums
// over p = 1 .. n (engine/attention_cost.py; every n here is >= 0, so / is floor division).
int64_t causal_pairs(int64_t q, int64_t k) { return q * k - q * (q - 1) / 2; }

int64_t prefix_clipped(int64_t n, int64_t cap) {  // sum of min(p, cap)
  const int64_t m = std::min(n, cap);
  return m * (m + 1) / 2 + cap * (n - m);
}

int64_t clipped_pairs(int64_t q, int64_t k, int64_t cap) {
  return prefix_clipped(k, cap) - prefix_clipped(k - q, cap);
}

template <int64_t kRatio>
int64_t prefix_blocks(int64_t n) {  // sum of p / ratio: complete compressed blocks
  const int64_t m = n / kRatio;
  return kRatio * m * (m - 1) / 2 + m * (n - m * kRatio + 1);
}

template <int64_t kRatio>
int64_t prefix_blocks(int64_t n, int64_t cap) {  // sum of min(p / ratio, cap)
  const int64_t below =
      std::min(n, kRatio * cap - 1);  // p / ratio < cap exactly when p < ratio * cap
  return prefix_blocks<kRatio>(below) + cap * (n - below);
}

template <int64_t kRatio>
int64_t block_pairs(int64_t q, int64_t k) {
  return prefix_blocks<kRatio>(k) - prefix_blocks<kRatio>(k - q);
}

template <int64_t kRatio>
int64_t block_pairs(int64_t q, int64_t k, int64_t cap) {
  return prefix_blocks<kRatio>(k, cap) - prefix_blocks<kRatio>(k - q, cap);
}

template <size_t kN>
double dot(const std::array<double, kN>& a, const std::array<double, kN>& b) {
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i) sum += a[i] * b[i];
  return sum;
}

}  // namespace

CostModel::CostModel(const ModelGeometry& m, const ByteSizes& bytes)
    : name_(m.name),
      v4_(m.architecture == "deepseek_v4"),
      has_mtp_(m.num_nextn_predict_layers > 0),
      bytes_(bytes),
      index_topk_(m.index_topk),
      sliding_window_(m.sliding_window) {
  if (!v4_ && m.architecture != "deepseek_v3")
    throw std::invalid_argument("unknown architecture '" + m.architecture + "'");
  const int64_t H = m.hidden_size, L = m.num_hidden_layers, E = m.n_routed_experts;
  const int64_t dense = m.first_k_dense_replace, moe = L - dense;
  const int64_t routed = L - std::max(dense, m.num_hash_layers);
  const int64_t expert = 3 * H * m.moe_intermediate_size;  // SwiGLU gate, up, down
  const int64_t dense_params = 3 * H * m.intermediate_size;
  const int64_t moe_active = expert * (m.num_experts_per_tok + m.n_shared_experts);
  const int64_t router = H * E, head = H * m.vocab_size;

  if (v4_) {
    const auto& ratios = m.compress_ratios;  // every layer's, then the MTP layers'
    has_csa_ = std::find(ratios.begin(), ratios.end(), kCsaRatio) != ratios.end();
    has_hca_ = std::find(ratios.begin(), ratios.end(), kHcaRatio) != ratios.end();
    std::map<int64_t, int64_t> layers;  // compress ratio -> layers
    for (int64_t i = 0; i < L; ++i) ++layers[ratios.at(i)];
    for (const auto& [ratio, count] : layers) add_layers(main_, v4_layer(m, ratio), count);
  } else {
    add_layers(main_, mla_layer(m), L);
  }
  main_.attention_flops = main_.flops;
  main_.attention_weight_bytes = main_.weight_bytes;
  main_.dense_flops_per_token =
      2.0 * dense * dense_params + 2.0 * moe * expert * m.n_shared_experts + 2.0 * routed * router;
  main_.flops[kTokens] +=
      2.0 * dense * dense_params + 2.0 * moe * moe_active + 2.0 * routed * router;
  main_.flops[kLogits] += 2.0 * head;
  main_.weight_bytes += static_cast<double>(dense * dense_params + routed * router) * bytes.weight;
  main_.moe_layers = moe;

  if (has_mtp_) {  // eh_proj, one attention + MoE layer, the shared head
    add_layers(mtp_, v4_ ? v4_layer(m, m.compress_ratios.at(L)) : mla_layer(m), 1);
    mtp_.attention_flops = mtp_.flops;
    mtp_.attention_weight_bytes = mtp_.weight_bytes;
    const int64_t eh_proj = 2 * H * H;
    mtp_.dense_flops_per_token = 2.0 * (eh_proj + router + expert * m.n_shared_experts);
    mtp_.flops[kTokens] += 2.0 * (eh_proj + router + moe_active);
    mtp_.flops[kLogits] += 2.0 * head;
    mtp_.weight_bytes += static_cast<double>(eh_proj + router) * bytes.weight;
    mtp_.moe_layers = 1;
  }

  head_bytes_ = static_cast<double>(head) * bytes.weight;
  routed_experts_ = static_cast<double>(E);
  every_expert_ = m.num_experts_per_tok >= E;
  log1p_miss_ = every_expert_ ? 0.0 : std::log1p(-static_cast<double>(m.num_experts_per_tok) / E);
  expert_bytes_ = static_cast<double>(expert) * bytes.expert_weight;
  shared_expert_bytes_ = static_cast<double>(m.n_shared_experts * expert) * bytes.weight;
  top_k_ = m.num_experts_per_tok;
  expert_flops_ = 2.0 * expert;
}

// One MLA layer (attention_cost.mla_layer). Prefill rows of a model without an indexer run
// in MHA form, every other row absorbed; each form has its cost per attended pair.
CostModel::Layer CostModel::mla_layer(const ModelGeometry& m) const {
  const int64_t H = m.hidden_size, N = m.num_attention_heads, R = m.qk_rope_head_dim;
  const int64_t Lq = m.q_lora_rank, Lkv = m.kv_lora_rank, P = m.qk_nope_head_dim, V = m.v_head_dim;
  const int64_t q_params = Lq == 0 ? H * N * (P + R) : H * Lq + Lq * N * (P + R);
  const int64_t proj = q_params + H * (Lkv + R) + N * V * H;
  const int64_t kv_b = Lkv * N * (P + V);
  const double kv_entry = static_cast<double>(Lkv + R) * bytes_.kv;
  Layer layer;
  layer.params = static_cast<double>(proj + kv_b);
  layer.flops[kTokens] = 2.0 * proj;
  layer.flops[kUpTokens] = 2.0 * kv_b;
  layer.flops[kAttendedMha] = static_cast<double>(2 * N * (P + R) + 2 * N * V);
  layer.flops[kAttendedAbsorbed] = static_cast<double>(2 * N * (Lkv + R) + 2 * N * Lkv);
  layer.kv_bytes[kTokens] = kv_entry;  // written
  if (m.index_topk == 0) {
    layer.kv_bytes[kKeys] = kv_entry;
    return layer;
  }
  const int64_t nI = m.index_n_heads, dI = m.index_head_dim;
  const int64_t indexer = Lq * nI * dI + H * dI + H * nI;  // q from the q latent, k, head weights
  layer.params += static_cast<double>(indexer);
  layer.flops[kTokens] += 2.0 * indexer;
  layer.flops[kPairs] = 2.0 * nI * dI;
  layer.kv_bytes[kSelected] = kv_entry;
  layer.kv_bytes[kKeys] = static_cast<double>(dI) * bytes_.index_kv;
  layer.kv_bytes[kTokens] += static_cast<double>(dI) * bytes_.index_kv;
  return layer;
}

// One deepseek_v4 layer (attention_cost.v4_layer): sliding window, plus CSA's indexed
// top-k or HCA's every compressed entry.
CostModel::Layer CostModel::v4_layer(const ModelGeometry& m, int64_t ratio) const {
  const int64_t H = m.hidden_size, N = m.num_attention_heads, d = m.head_dim, Lq = m.q_lora_rank;
  const int64_t proj = H * Lq + Lq * N * d + H * d  // wq_a, wq_b, wkv
                       + N * d * m.o_lora_rank + m.o_groups * m.o_lora_rank * H;  // wo_a, wo_b
  const double entry = static_cast<double>(d) * bytes_.kv;
  const double attended = 4.0 * N * d;  // one latent head of head_dim serves as K and V
  Layer layer;
  layer.params = static_cast<double>(proj);
  layer.flops[kTokens] = 2.0 * proj;
  layer.flops[kWindowPairs] = attended;
  layer.kv_bytes[kWindowRead] = entry;
  layer.kv_bytes[kWindowWrite] = entry;
  if (ratio == kCsaRatio) {
    const int64_t nI = m.index_n_heads, dI = m.index_head_dim;
    const int64_t compressor = 2 * H * 2 * d;  // wkv, wgate over overlapping windows
    const int64_t indexer =
        Lq * nI * dI + H * nI + 2 * H * 2 * dI;  // wq_b, weights_proj, compressor
    const double index_entry = static_cast<double>(dI) * bytes_.index_kv;
    layer.params += static_cast<double>(compressor + indexer);
    layer.flops[kTokens] += 2.0 * compressor + 2.0 * indexer;
    layer.flops[kCsaScores] = 2.0 * nI * dI;
    layer.flops[kCsaAttended] = attended;
    layer.kv_bytes[kCsaProduced] = entry + index_entry;
    layer.kv_bytes[kCsaSelected] = entry;
    layer.kv_bytes[kCsaKeys] = index_entry;
  } else if (ratio == kHcaRatio) {
    const int64_t compressor = 2 * H * d;
    layer.params += static_cast<double>(compressor);
    layer.flops[kTokens] += 2.0 * compressor;
    layer.flops[kHcaAttended] = attended;
    layer.kv_bytes[kHcaProduced] = entry;
    layer.kv_bytes[kHcaKeys] = entry;
  } else if (ratio != 0) {
    throw std::invalid_argument("compress ratio " + std::to_string(ratio) + " is not 0, 4 or 128");
  }
  return layer;
}

void CostModel::add_layers(Module& module, const Layer& layer, int64_t count) const {
  for (int t = 0; t < kNumTerms; ++t) {
    module.flops[t] += count * layer.flops[t];
    module.kv_bytes[t] += count * layer.kv_bytes[t];
  }
  module.weight_bytes += count * layer.params * bytes_.weight;
}

CostModel::Paths CostModel::paths(const Batch& batch, const int64_t* accepted, bool mtp) const {
  if (mtp && !has_mtp_)
    throw std::invalid_argument("model " + name_ + " has no MTP module; mtp must be false");
  return v4_ ? sum_rows<true>(batch, accepted, mtp) : sum_rows<false>(batch, accepted, mtp);
}

StepCost CostModel::batch(const Batch& batch, const int64_t* accepted, bool mtp) const {
  return cost(paths(batch, accepted, mtp), mtp);
}

StepCost CostModel::cost(const Paths& p, bool mtp) const {
  StepCost cost{dot(main_.flops, p.model), dot(main_.flops, p.executed),
                module_bytes(main_, p.executed)};
  if (mtp && p.drafted[kTokens] > 0) {
    cost.executed_flops += dot(mtp_.flops, p.drafted);
    cost.bytes += module_bytes(mtp_, p.drafted);
  }
  return cost;
}

StepParts CostModel::parts(const Batch& batch, const int64_t* accepted, bool mtp) const {
  const Paths p = paths(batch, accepted, mtp);
  StepParts parts;
  parts.cost = cost(p, mtp);
  const auto add = [this, &parts](const Module& module, const Terms& sums) {
    const double tokens = sums[kTokens];
    if (tokens == 0) return;
    parts.attention_flops += dot(module.attention_flops, sums);
    parts.attention_bytes += module.attention_weight_bytes;
    parts.kv_bytes += dot(module.kv_bytes, sums);
    parts.dense_flops +=
        module.dense_flops_per_token * tokens + module.flops[kLogits] * sums[kLogits];
    parts.dense_bytes += module.weight_bytes - module.attention_weight_bytes +
                         module.moe_layers * shared_expert_bytes_ +
                         (sums[kLogits] > 0 ? head_bytes_ : 0.0);
    parts.moe_tokens += module.moe_layers * tokens;
  };
  add(main_, p.executed);
  parts.tokens = p.executed[kTokens];
  if (mtp) {
    add(mtp_, p.drafted);
    parts.mtp_tokens = p.drafted[kTokens];
  }
  return parts;
}

template <bool kV4>
CostModel::Paths CostModel::sum_rows(const Batch& batch, const int64_t* accepted, bool mtp) const {
  // Most rows run as scheduled on every path (no draft rejected, no padding): they add to
  // `common` once instead of to each path.
  Sums<kV4> common{}, model{}, executed{}, drafted{};
  int64_t mha_prefix = 0;  // cached keys of MHA rows, which a reup path up-projects too
  for (size_t i = 0; i < batch.rows(); ++i) {
    const int64_t q = batch.seqlen_q[i], k = batch.seqlen_k[i], padded = batch.padded_q[i];
    const bool prefill = batch.kind[i] != kDecode;
    const int64_t final_chunk = batch.kind[i] == kFinal;
    const int64_t logits = prefill ? final_chunk : q;
    const int64_t rejected = prefill ? 0 : q - 1 - (accepted ? accepted[i] : 0);
    if (rejected == 0 && padded == q) {
      add_row<kV4>(q, k, logits, prefill, common);
    } else {
      // model: accepted positions only (rejected drafts are the row's last); executed:
      // padding runs as extra positions at the row's end; the MTP module: as scheduled
      add_row<kV4>(q - rejected, k - rejected, logits - rejected, prefill, model);
      add_row<kV4>(padded, k + padded - q, prefill ? final_chunk : padded, prefill, executed);
      if (mtp) add_row<kV4>(q, k, logits, prefill, drafted);
    }
    if (!kV4 && prefill && !index_topk_) mha_prefix += k - q;
  }
  // The int64 sums are exact; the reference's float64 sums of the same integers are too
  // while below 2^53.
  const auto totals = [&common](const Sums<kV4>& path, int64_t reup_prefix) {
    Terms t{};
    for (size_t i = 0; i < path.size(); ++i) t[i] = static_cast<double>(common[i] + path[i]);
    t[kUpTokens] = t[kTokens] + static_cast<double>(reup_prefix);
    return t;
  };
  Paths paths{totals(model, 0), totals(executed, mha_prefix), {}};
  if (mtp) paths.drafted = totals(drafted, mha_prefix);
  return paths;
}

template <bool kV4>
inline void CostModel::add_row(int64_t q, int64_t k, int64_t logits, bool prefill,
                               Sums<kV4>& sums) const {
  sums[kTokens] += q;
  sums[kLogits] += logits;
  if constexpr (kV4) {
    const int64_t window = sliding_window_;
    sums[kWindowPairs] += clipped_pairs(q, k, window);
    sums[kWindowRead] += std::min(k, q + window - 1);
    sums[kWindowWrite] += std::min(q, window);
    if (has_csa_) {
      const int64_t keys = k / kCsaRatio;
      sums[kCsaKeys] += keys;
      sums[kCsaProduced] += keys - (k - q) / kCsaRatio;
      sums[kCsaScores] += block_pairs<kCsaRatio>(q, k);
      sums[kCsaAttended] += block_pairs<kCsaRatio>(q, k, index_topk_);
      sums[kCsaSelected] += std::min(keys, q * index_topk_);
    }
    if (has_hca_) {
      const int64_t keys = k / kHcaRatio;
      sums[kHcaKeys] += keys;
      sums[kHcaProduced] += keys - (k - q) / kHcaRatio;
      sums[kHcaAttended] += block_pairs<kHcaRatio>(q, k);
    }
  } else {
    sums[kKeys] += k;
    if (index_topk_) {  // DSA: every row absorbed, over its top-k latents
      sums[kAttendedAbsorbed] += clipped_pairs(q, k, index_topk_);
      sums[kPairs] += causal_pairs(q, k);
      sums[kSelected] += std::min(k, q * index_topk_);
    } else {
      const int64_t pairs = causal_pairs(q, k);
      sums[kAttendedMha] += prefill ? pairs : 0;
      sums[kAttendedAbsorbed] += prefill ? 0 : pairs;
    }
  }
}

// Weights and KV traffic of one module; a module with no token reads no weight.
double CostModel::module_bytes(const Module& module, const Terms& sums) const {
  const double kv = dot(module.kv_bytes, sums);
  if (sums[kTokens] == 0) return kv;
  return module.weight_bytes + module.moe_layers * moe_weight_bytes(sums[kTokens]) +
         (sums[kLogits] > 0 ? head_bytes_ : 0.0) + kv;
}

// Shared experts plus the routed experts `tokens` touch in one MoE layer: routing uniform
// and independent, E * (1 - (1 - top_k/E)^tokens) distinct experts in expectation.
double CostModel::moe_weight_bytes(double tokens) const {
  const double distinct =
      every_expert_ ? routed_experts_ : routed_experts_ * -std::expm1(tokens * log1p_miss_);
  return distinct * expert_bytes_ + shared_expert_bytes_;
}

}  // namespace steptrace
