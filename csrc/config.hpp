// Scheduler configuration: one plain struct, and for_each_field, the one table of its fields
// (name, minimum or choices, meaning). The bindings, engine.config.SchedulerConfig, the
// workload schema, the stub and docs/workloads.md all derive from that table: adding a
// field is a member here, a row in for_each_field, and a regenerated stub.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>

namespace steptrace {

enum class EngineType : uint8_t { kNormal, kPrompt, kCompletion };
enum class PreemptOrder : uint8_t { kLongestOutput, kShortestOutput };
enum class DpAssign : uint8_t { kRoundRobin, kLeastLoaded, kCacheAware, kSessionAffinity };

// The most tokens one sequence may need, prompt_len + max(max_new_tokens, lookahead): the
// core counts a sequence's tokens in 32 bits, with room to add a chunk, a lookahead or a
// block to any count without overflow. A longer request is rejected when added.
inline constexpr int32_t kMaxSeqTokens = std::numeric_limits<int32_t>::max() / 2;

// A choice field's names, in enum order.
inline constexpr const char* kEngineTypes[] = {"normal", "prompt", "completion"};
inline constexpr const char* kPreemptOrders[] = {"longest_output", "shortest_output"};
inline constexpr const char* kDpAssigns[] = {"round_robin", "least_loaded", "cache_aware",
                                             "session_affinity"};

struct SchedulerConfig {
  int32_t max_num_batched_tokens = 8192;
  int32_t max_num_seqs = 256;
  int32_t num_kv_blocks = 4096;
  int32_t block_size = 16;
  int32_t cp_size = 1;
  int32_t dp_size = 1;
  int32_t num_mtp = 0;
  bool overlap = false;
  bool prefix_caching = true;
  bool session_retention = false;
  int32_t host_kv_blocks = 0;
  bool mixed_batches = false;
  EngineType engine_type = EngineType::kNormal;
  PreemptOrder preempt_order = PreemptOrder::kLongestOutput;
  DpAssign dp_assign = DpAssign::kRoundRobin;
  int32_t lookahead_slots = -1;    // optional: -1 is None
  int32_t max_prefill_chunk = -1;  // optional: -1 is None

  // KV slots reserved beyond a finished prefill for the first decode steps.
  int32_t lookahead() const;
  // Throws std::invalid_argument naming the field and value: a field below its minimum, or
  // a length the core derives from the fields beyond kMaxSeqTokens.
  void validate() const;
};

// Every field, in declaration order: v.integer / v.optional (an int, -1 standing for None) /
// v.boolean / v.choice(name, member, [minimum | names,] meaning).
template <class Config, class Visitor>
constexpr void for_each_field(Config& c, Visitor& v) {
  v.integer("max_num_batched_tokens", c.max_num_batched_tokens, 1,
            "token budget of one prompt or mixed round (padded lengths)");
  v.integer("max_num_seqs", c.max_num_seqs, 1, "running + newly admitted sequences per DP rank");
  v.integer("num_kv_blocks", c.num_kv_blocks, 1, "KV blocks in each DP rank's pool");
  v.integer("block_size", c.block_size, 1, "tokens per KV block");
  v.integer("cp_size", c.cp_size, 1, "context-parallel size; chunks align to 2 * cp_size");
  v.integer("dp_size", c.dp_size, 1, "data-parallel ranks, each with its own block pool");
  v.integer("num_mtp", c.num_mtp, 0, "MTP draft tokens per decode step (q = 1 + num_mtp)");
  v.boolean("overlap", c.overlap, "one forward in flight while the next step is scheduled");
  v.boolean("prefix_caching", c.prefix_caching,
            "share committed prompt blocks by their hash ids, retained until evicted (LRU)");
  v.boolean("session_retention", c.session_retention,
            "a session's retained blocks are evicted last until the session ends");
  v.integer("host_kv_blocks", c.host_kv_blocks, 0,
            "blocks of each DP rank's host KV tier, which evicted blocks go to; 0: none");
  v.boolean("mixed_batches", c.mixed_batches,
            "normal engine: decode rows and prefill chunks in one step under the token budget, "
            "no vote");
  v.choice("engine_type", c.engine_type, kEngineTypes,
           "normal, prompt (prefill only) or completion (decode only)");
  v.choice("preempt_order", c.preempt_order, kPreemptOrders,
           "which running sequence is preempted first under KV pressure");
  v.choice("dp_assign", c.dp_assign, kDpAssigns, "how new sequences are spread over DP ranks");
  v.optional("lookahead_slots", c.lookahead_slots, 0,
             "KV slots reserved past a prefill; null: (1 + num_mtp) * (1 + overlap), 0 for prompt");
  v.optional("max_prefill_chunk", c.max_prefill_chunk, 1,
             "largest non-final prefill chunk in tokens; null: unlimited");
}

// Raises std::invalid_argument "<name> must be >= <minimum>, got <value>" unless it is.
void check_minimum(const char* name, int64_t value, int64_t minimum);

}  // namespace steptrace
