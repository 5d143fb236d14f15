#include "config.hpp"

#include <stdexcept>

#include "sequence.hpp"

namespace steptrace {

int32_t SchedulerConfig::lookahead() const {
  if (lookahead_slots >= 0) return lookahead_slots;
  if (engine_type == EngineType::kPrompt) return 0;
  return (1 + num_mtp) * (1 + (overlap ? 1 : 0));
}

static void require(bool ok, const char* name, int64_t value, const char* rule) {
  if (!ok)
    throw std::invalid_argument(std::string(name) + " must be " + rule + ", got " +
                                std::to_string(value));
}

void SchedulerConfig::validate() const {
  require(max_num_batched_tokens >= 1, "max_num_batched_tokens", max_num_batched_tokens, ">= 1");
  require(max_num_seqs >= 1, "max_num_seqs", max_num_seqs, ">= 1");
  require(num_kv_blocks >= 1, "num_kv_blocks", num_kv_blocks, ">= 1");
  require(block_size >= 1, "block_size", block_size, ">= 1");
  require(cp_size >= 1, "cp_size", cp_size, ">= 1");
  require(dp_size >= 1, "dp_size", dp_size, ">= 1");
  require(num_mtp >= 0, "num_mtp", num_mtp, ">= 0");
  require(lookahead_slots >= -1, "lookahead_slots", lookahead_slots, ">= 0 (or -1 for the default)");
  require(max_prefill_chunk == -1 || max_prefill_chunk >= 1, "max_prefill_chunk",
          max_prefill_chunk, ">= 1 (or -1 for unlimited)");
  require(max_num_batched_tokens >= 2 * cp_size, "max_num_batched_tokens",
          max_num_batched_tokens, ">= 2 * cp_size");
  require(max_prefill_chunk == -1 || max_prefill_chunk >= 2 * cp_size, "max_prefill_chunk",
          max_prefill_chunk, ">= 2 * cp_size");
}

EngineType parse_engine_type(const std::string& name) {
  if (name == "normal") return EngineType::kNormal;
  if (name == "prompt") return EngineType::kPrompt;
  if (name == "completion") return EngineType::kCompletion;
  throw std::invalid_argument("engine_type must be one of normal, prompt, completion; got '" +
                              name + "'");
}

PreemptOrder parse_preempt_order(const std::string& name) {
  if (name == "longest_output") return PreemptOrder::kLongestOutput;
  if (name == "shortest_output") return PreemptOrder::kShortestOutput;
  throw std::invalid_argument(
      "preempt_order must be one of longest_output, shortest_output; got '" + name + "'");
}

DpAssign parse_dp_assign(const std::string& name) {
  if (name == "round_robin") return DpAssign::kRoundRobin;
  if (name == "least_loaded") return DpAssign::kLeastLoaded;
  throw std::invalid_argument("dp_assign must be one of round_robin, least_loaded; got '" +
                              name + "'");
}

const char* status_name(SeqStatus s) {
  switch (s) {
    case SeqStatus::kWaiting: return "waiting";
    case SeqStatus::kRunning: return "running";
    case SeqStatus::kFinished: return "finished";
    case SeqStatus::kRejected: return "rejected";
  }
  return "?";
}

}  // namespace steptrace
