#include "config.hpp"

#include <algorithm>
#include <stdexcept>

#include "sequence.hpp"

namespace steptrace {

namespace {

// The table covers the whole struct: a member without a row fails to compile here.
struct ByteCount {
  size_t bytes = 0;
  template <class T, class... Rest>
  constexpr void integer(const char*, T& m, Rest&&...) {
    bytes += sizeof(m);
  }
  template <class T, class... Rest>
  constexpr void optional(const char*, T& m, Rest&&...) {
    bytes += sizeof(m);
  }
  template <class T, class... Rest>
  constexpr void boolean(const char*, T& m, Rest&&...) {
    bytes += sizeof(m);
  }
  template <class T, class... Rest>
  constexpr void choice(const char*, T& m, Rest&&...) {
    bytes += sizeof(m);
  }
};

constexpr size_t table_bytes() {
  SchedulerConfig c{};
  ByteCount count;
  for_each_field(c, count);
  return count.bytes;
}
// The members' bytes, padded to the struct's alignment as the compiler pads them at the end.
constexpr size_t padded_table_bytes() {
  constexpr size_t align = alignof(SchedulerConfig);
  return (table_bytes() + align - 1) / align * align;
}
static_assert(padded_table_bytes() == sizeof(SchedulerConfig),
              "every SchedulerConfig member needs its row in for_each_field");

struct Validator {
  void integer(const char* name, int32_t value, int32_t minimum, const char*) {
    check_minimum(name, value, minimum);
  }
  void optional(const char* name, int32_t value, int32_t minimum, const char*) {
    if (value != -1) check_minimum(name, value, minimum);
  }
  void boolean(const char*, bool, const char*) {}
  template <class E, size_t N>
  void choice(const char* name, E value, const char* const (&)[N], const char*) {
    if (static_cast<size_t>(value) >= N)
      throw std::invalid_argument(std::string(name) + " is out of range");
  }
};

}  // namespace

void check_minimum(const char* name, int64_t value, int64_t minimum) {
  if (value < minimum)
    throw std::invalid_argument(std::string(name) + " must be >= " + std::to_string(minimum) +
                                ", got " + std::to_string(value));
}

namespace {

// lookahead() in 64 bits, as validate() checks it before it is used.
int64_t lookahead_of(const SchedulerConfig& c) {
  if (c.lookahead_slots >= 0) return c.lookahead_slots;
  if (c.engine_type == EngineType::kPrompt) return 0;
  return (1 + int64_t{c.num_mtp}) * (c.overlap ? 2 : 1);
}

void check_maximum(const std::string& what, int64_t value, int64_t maximum) {
  if (value > maximum)
    throw std::invalid_argument(what + " must be <= " + std::to_string(maximum) + ", got " +
                                std::to_string(value));
}

}  // namespace

int32_t SchedulerConfig::lookahead() const {
  return static_cast<int32_t>(std::min<int64_t>(lookahead_of(*this), kMaxSeqTokens));
}

void SchedulerConfig::validate() const {
  Validator v;
  for_each_field(*this, v);
  // Lengths the core adds to a sequence's token counts: each at most what a sequence holds.
  check_maximum("block_size", block_size, kMaxSeqTokens);
  check_maximum("cp_size", cp_size, kMaxSeqTokens / 2);
  check_maximum(lookahead_slots >= 0 ? std::string("lookahead_slots")
                                     : "the lookahead (1 + num_mtp) * (1 + overlap)",
                lookahead_of(*this), kMaxSeqTokens);
  const std::string twice_cp = "2 * cp_size = " + std::to_string(2 * cp_size);
  if (max_num_batched_tokens < 2 * cp_size)
    throw std::invalid_argument("max_num_batched_tokens=" + std::to_string(max_num_batched_tokens) +
                                " is below " + twice_cp +
                                ": no aligned chunk could ever be scheduled");
  if (max_prefill_chunk != -1 && max_prefill_chunk < 2 * cp_size)
    throw std::invalid_argument("max_prefill_chunk=" + std::to_string(max_prefill_chunk) +
                                " is below " + twice_cp +
                                ": no aligned non-final chunk could ever be scheduled");
  if (mixed_batches && engine_type != EngineType::kNormal)
    throw std::invalid_argument(
        std::string("mixed_batches=True needs a normal engine; this is a ") +
        kEngineTypes[static_cast<int>(engine_type)] + " engine");
  if (mixed_batches && max_num_batched_tokens < 1 + int64_t{num_mtp})
    throw std::invalid_argument(
        "mixed_batches=True needs max_num_batched_tokens >= 1 + num_mtp = " +
        std::to_string(1 + int64_t{num_mtp}) + " (a decode row), got " +
        std::to_string(max_num_batched_tokens));
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
