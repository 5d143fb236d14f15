#include "block_hashes.hpp"

#include <algorithm>

namespace steptrace {

namespace {

uint64_t mix(uint64_t h, uint64_t x) {
  uint64_t z = h ^ (x + 0x9E3779B97F4A7C15ULL + (h << 6) + (h >> 2));
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

}  // namespace

std::string block_size_mismatch(int64_t hash_block, int64_t block_size) {
  if (hash_block % block_size == 0 || block_size % hash_block == 0) return {};
  return "hash block size " + std::to_string(hash_block) + " and block_size " +
         std::to_string(block_size) + ": one must divide the other";
}

void block_hashes(const std::vector<int64_t>& ids, int64_t hash_block, int32_t block_size,
                  int32_t prompt_len, std::vector<int64_t>& out) {
  out.clear();
  const int64_t full = prompt_len / block_size;
  const int64_t n = static_cast<int64_t>(ids.size());
  uint64_t chain = 0;
  if (hash_block >= block_size) {
    const int64_t k = hash_block / block_size;
    out.reserve(static_cast<size_t>(std::min(full, n * k)));
    for (int64_t i = 0; i < n && i * k < full; ++i) {
      chain = mix(chain, static_cast<uint64_t>(ids[i]));
      for (int64_t sub = 0; sub < k && i * k + sub < full; ++sub)
        out.push_back(static_cast<int64_t>(mix(chain, static_cast<uint64_t>(sub))));
    }
  } else {
    const int64_t m = block_size / hash_block;
    out.reserve(static_cast<size_t>(std::min(full, n / m)));
    for (int64_t i = 0; i < n && i / m < full; ++i) {
      chain = mix(chain, static_cast<uint64_t>(ids[i]));
      if ((i + 1) % m == 0) out.push_back(static_cast<int64_t>(mix(chain, 0)));
    }
  }
}

}  // namespace steptrace
