// numpy's PCG64 (pcg_setseq_128_xsl_rr_64) and its Generator.random(): the modeled
// executor draws MTP acceptances from the stream np.random.default_rng(seed) makes, so a
// seed gives the same drafts whichever loop replays it (Python seeds it with that
// generator's state).
#pragma once

#include <cstdint>

namespace steptrace {

class Pcg64 {
 public:
  __extension__ typedef unsigned __int128 u128;

  Pcg64(uint64_t state_hi, uint64_t state_lo, uint64_t inc_hi, uint64_t inc_lo)
      : state_((u128{state_hi} << 64) | state_lo), inc_((u128{inc_hi} << 64) | inc_lo) {}

  uint64_t next64() {
    state_ = state_ * kMultiplier + inc_;
    const uint64_t x = static_cast<uint64_t>(state_ >> 64) ^ static_cast<uint64_t>(state_);
    const unsigned rot = static_cast<unsigned>(state_ >> 122);
    return (x >> rot) | (x << ((64 - rot) & 63));
  }
  // A double in [0, 1): Generator.random()'s 53 high bits.
  double uniform() { return static_cast<double>(next64() >> 11) * (1.0 / 9007199254740992.0); }

 private:
  static constexpr u128 kMultiplier =
      (u128{0x2360ED051FC65DA4ULL} << 64) | u128{0x4385DF649FCCF645ULL};
  u128 state_, inc_;
};

}  // namespace steptrace
