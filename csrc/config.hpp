// Scheduler configuration: one plain struct, the same field names as engine.SchedulerConfig.
#pragma once

#include <cstdint>
#include <string>

namespace steptrace {

enum class EngineType : uint8_t { kNormal, kPrompt, kCompletion };
enum class PreemptOrder : uint8_t { kLongestOutput, kShortestOutput };
enum class DpAssign : uint8_t { kRoundRobin, kLeastLoaded };

struct SchedulerConfig {
  int32_t max_num_batched_tokens = 8192;  // token budget of one prompt round (padded lengths)
  int32_t max_num_seqs = 256;             // running + newly admitted sequences per DP rank
  int32_t num_kv_blocks = 4096;           // KV blocks in each DP rank's pool
  int32_t block_size = 16;                // tokens per KV block
  int32_t cp_size = 1;                    // context-parallel size; chunks align to 2 * cp_size
  int32_t dp_size = 1;                    // data-parallel ranks
  int32_t num_mtp = 0;                    // MTP draft tokens per decode step
  bool overlap = false;                   // one forward in flight while scheduling the next
  EngineType engine_type = EngineType::kNormal;
  PreemptOrder preempt_order = PreemptOrder::kLongestOutput;
  DpAssign dp_assign = DpAssign::kRoundRobin;
  int32_t lookahead_slots = -1;    // -1: (1 + num_mtp) * (1 + overlap); 0 for prompt engines
  int32_t max_prefill_chunk = -1;  // -1: unlimited

  // KV slots reserved beyond a finished prefill for the first decode steps.
  int32_t lookahead() const;
  // Throws std::invalid_argument naming the field and value.
  void validate() const;
};

EngineType parse_engine_type(const std::string& name);
PreemptOrder parse_preempt_order(const std::string& name);
DpAssign parse_dp_assign(const std::string& name);

}  // namespace steptrace
