// A small scheduler configuration for the C++-only tests: 64 blocks of 16 tokens, 64 tokens
// a step.
#pragma once

#include "config.hpp"

inline steptrace::SchedulerConfig small_engine(steptrace::EngineType type) {
  steptrace::SchedulerConfig cfg;
  cfg.engine_type = type;
  cfg.max_num_batched_tokens = 64;
  cfg.num_kv_blocks = 64;
  cfg.block_size = 16;
  return cfg;
}
