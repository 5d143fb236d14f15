// FLOPs and bytes of one forward step, the fast twin of engine/flops.py's FlopsEstimator:
// the three totals of calc_flops(seqlen_q, seqlen_k, kind=kind, padded_q=padded_q,
// accepted=accepted, mtp_q=seqlen_q if mtp else None), term for term. Every cost there is
// a geometry constant times a batch sum of some per-row integer (tokens, keys, attended
// pairs, ...), or a function of the token count (the experts touched), so the constructor
// folds the geometry into one coefficient per sum and batch() sums rows and takes dot
// products.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "schedule_output.hpp"

namespace steptrace {

// engine.model_config.ModelConfig, the fields the cost reads; an absent (None) field is 0.
struct ModelGeometry {
  std::string name;
  std::string architecture;  // deepseek_v3 | deepseek_v4
  int64_t hidden_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t vocab_size = 0;
  int64_t q_lora_rank = 0;  // 0: q projected from the hidden state directly
  int64_t qk_rope_head_dim = 0;
  int64_t first_k_dense_replace = 0;
  int64_t intermediate_size = 0;
  int64_t moe_intermediate_size = 0;
  int64_t n_routed_experts = 0;
  int64_t n_shared_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t v_head_dim = 0;
  int64_t num_nextn_predict_layers = 0;
  int64_t index_n_heads = 0;
  int64_t index_head_dim = 0;
  int64_t index_topk = 0;  // 0: no indexer
  int64_t head_dim = 0;
  int64_t o_lora_rank = 0;
  int64_t o_groups = 0;
  int64_t sliding_window = 0;
  std::vector<int64_t> compress_ratios;
  int64_t num_hash_layers = 0;
};

// Every ModelGeometry member, by the engine.model_config.ModelConfig field it is read from
// (None there reads as 0): v.text / v.integer / v.integers(name, member).
template <class Geometry, class Visitor>
void for_each_geometry_field(Geometry& g, Visitor& v) {
  v.text("name", g.name);
  v.text("architecture", g.architecture);
  v.integer("hidden_size", g.hidden_size);
  v.integer("num_hidden_layers", g.num_hidden_layers);
  v.integer("num_attention_heads", g.num_attention_heads);
  v.integer("vocab_size", g.vocab_size);
  v.integer("q_lora_rank", g.q_lora_rank);
  v.integer("qk_rope_head_dim", g.qk_rope_head_dim);
  v.integer("first_k_dense_replace", g.first_k_dense_replace);
  v.integer("intermediate_size", g.intermediate_size);
  v.integer("moe_intermediate_size", g.moe_intermediate_size);
  v.integer("n_routed_experts", g.n_routed_experts);
  v.integer("n_shared_experts", g.n_shared_experts);
  v.integer("num_experts_per_tok", g.num_experts_per_tok);
  v.integer("kv_lora_rank", g.kv_lora_rank);
  v.integer("qk_nope_head_dim", g.qk_nope_head_dim);
  v.integer("v_head_dim", g.v_head_dim);
  v.integer("num_nextn_predict_layers", g.num_nextn_predict_layers);
  v.integer("index_n_heads", g.index_n_heads);
  v.integer("index_head_dim", g.index_head_dim);
  v.integer("index_topk", g.index_topk);
  v.integer("head_dim", g.head_dim);
  v.integer("o_lora_rank", g.o_lora_rank);
  v.integer("o_groups", g.o_groups);
  v.integer("sliding_window", g.sliding_window);
  v.integers("compress_ratios", g.compress_ratios);
  v.integer("num_hash_layers", g.num_hash_layers);
}

// Bytes per element, as FlopsEstimator takes them.
struct ByteSizes {
  double weight;
  double expert_weight;  // routed experts
  double kv;
  double index_kv;
};

struct StepCost {
  double model_flops = 0;
  double executed_flops = 0;
  double bytes = 0;
  // A deployment's modeled step on this rank, by part (DeploymentModel; 0 elsewhere), in
  // seconds: each part's roofline, the all-to-alls and TP all-reduces
  double attention_s = 0;
  double dense_s = 0;  // dense FFN, shared experts, router, LM head
  double experts_s = 0;
  double dispatch_s = 0;
  double combine_s = 0;
  double allreduce_s = 0;
  // Of dense_s: what ran on a second stream beside the routed experts' path (kernel tables
  // of a stack that overlaps its shared experts in decode steps)
  double aux_s = 0;
  // The rank's own modeled step, before it waits for the slowest rank: its parts,
  // overlapped as the deployment's micro-batches say (DeploymentModel), or its roofline
  // (the modeled executor without a deployment); 0 where steps are not modeled.
  double rank_s = 0;
  // Bit i set: part i (kernel_step.hpp's Part: attention, dense, experts, dispatch, combine,
  // allreduce) was looked up outside its kernel table's rows
  uint8_t extrapolated = 0;
};

// One rank's executed step by part, for a deployment to time: the attention layers, the
// rest but the routed experts, and the tokens the MoE layers route.
struct StepParts {
  StepCost cost;
  double attention_flops = 0;
  double attention_bytes = 0;  // attention weights, read once
  double kv_bytes = 0;  // KV cache read and written
  double dense_flops = 0;
  double dense_bytes = 0;  // dense FFN, shared experts, router, eh_proj, LM head weights
  double tokens = 0;  // positions through the main model
  double mtp_tokens = 0;  // positions through the MTP module
  double moe_tokens = 0;  // sum over MoE layers of the tokens routed there
};

class CostModel {
 public:
  // Throws std::invalid_argument for an unknown architecture or compress ratio.
  CostModel(const ModelGeometry& model, const ByteSizes& bytes);

  // accepted: drafts accepted per row (nullptr: none); mtp: the MTP module runs on every
  // computed position. The batch is trusted, as the scheduler makes it: every row computes
  // q >= 1 positions of its k >= q keys, padded_q >= q, and accepted lies within 0..q-1 on
  // decode rows, 0 on prefill rows. Nothing is checked but that the model has an MTP module
  // when mtp is set (std::invalid_argument).
  StepCost batch(const Batch& batch, const int64_t* accepted, bool mtp) const;
  // The same step by part (batch()'s StepCost included).
  StepParts parts(const Batch& batch, const int64_t* accepted, bool mtp) const;

  int64_t top_k() const { return top_k_; }
  // Routed-expert FLOPs per token per expert, and one routed expert's weight bytes.
  double expert_flops() const { return expert_flops_; }
  double expert_bytes() const { return expert_bytes_; }

 private:
  // Per-row integers whose batch sums the costs are linear in; a deepseek_v3 model sums
  // only the first kNumMlaTerms.
  enum Term {
    kTokens,            // q: positions computed
    kLogits,            // positions whose logits the step computes
    kKeys,              // MLA: k, keys visible to the last position
    kUpTokens,          // MLA: tokens kv_b up-projects (filled in after the rows, see sum_rows)
    kAttendedMha,       // MLA: attended (query, key) pairs of rows in MHA form
    kAttendedAbsorbed,  // MLA: the same, absorbed form
    kPairs,             // DSA: every causal pair, which the indexer scores
    kSelected,          // DSA: min(k, q * topk), the latents the top-k reads
    kNumMlaTerms,
    kWindowPairs = kNumMlaTerms,  // V4: attended pairs of the sliding window
    kWindowRead,        // V4: min(k, q + window - 1)
    kWindowWrite,       // V4: min(q, window)
    kCsaProduced,       // V4: compressed entries the row completes, ratio 4
    kCsaScores,         // V4: compressed entries each query sees (the indexer scores them)
    kCsaAttended,       // V4: the same, each capped at topk
    kCsaSelected,       // V4: min(k / 4, q * topk)
    kCsaKeys,           // V4: k / 4
    kHcaProduced,       // V4: as above, ratio 128
    kHcaAttended,
    kHcaKeys,
    kNumTerms
  };
  using Terms = std::array<double, kNumTerms>;
  template <bool kV4>
  using Sums = std::array<int64_t, kV4 ? kNumTerms : kNumMlaTerms>;

  // The main model or the MTP module: cost per unit of each term, and the weights.
  struct Module {
    Terms flops{};
    Terms kv_bytes{};
    double weight_bytes = 0;  // read whenever the module runs: all but the experts and head
    double moe_layers = 0;
    // the attention layers alone (flops and weight_bytes before the FFN is added)
    Terms attention_flops{};
    double attention_weight_bytes = 0;
    double dense_flops_per_token = 0;  // dense FFN, shared experts, router, eh_proj
  };
  // Each path's term sums over a batch: model (accepted positions), executed, drafted (the
  // MTP module's); drafted is all zero without mtp.
  struct Paths {
    Terms model{}, executed{}, drafted{};
  };
  struct Layer {
    Terms flops{};
    Terms kv_bytes{};
    double params = 0;
  };
  Layer mla_layer(const ModelGeometry& m) const;
  Layer v4_layer(const ModelGeometry& m, int64_t ratio) const;
  void add_layers(Module& module, const Layer& layer, int64_t count) const;

  template <bool kV4>
  Paths sum_rows(const Batch& batch, const int64_t* accepted, bool mtp) const;
  Paths paths(const Batch& batch, const int64_t* accepted, bool mtp) const;
  StepCost cost(const Paths& p, bool mtp) const;
  template <bool kV4>
  void add_row(int64_t q, int64_t k, int64_t logits, bool prefill, Sums<kV4>& sums) const;
  double module_bytes(const Module& module, const Terms& sums) const;
  double moe_weight_bytes(double tokens) const;

  std::string name_;
  bool v4_;
  bool has_mtp_;
  ByteSizes bytes_;
  int64_t index_topk_;
  int64_t sliding_window_;
  bool has_csa_ = false;  // V4: some layer (MTP included) compresses at ratio 4 / 128
  bool has_hca_ = false;
  Module main_;
  Module mtp_;
  double head_bytes_;
  // one MoE layer's weights: routed experts expected distinct, shared experts
  double routed_experts_;
  double log1p_miss_;  // log(1 - top_k / E): a token misses a given expert
  bool every_expert_;  // top_k == E
  double expert_bytes_;
  double shared_expert_bytes_;
  int64_t top_k_;
  double expert_flops_;
};

}  // namespace steptrace
