// A trace's hash ids, one per block of `hash_block` prompt tokens (Mooncake: 512), as the
// hashes of an engine's `block_size`-token blocks. Ids are chained (c_i = mix(c_{i-1}, id_i),
// so c_i names the whole prefix). When block_size divides hash_block, engine block j is
// mix(c_{j / k}, j % k) with k = hash_block / block_size; when hash_block divides block_size,
// engine block j is mix(c_{(j + 1) m - 1}, 0) with m = block_size / hash_block. Only the
// prompt's full blocks get a hash. engine/block_hashes.py is the Python mirror.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace steptrace {

// Empty unless one size divides the other.
std::string block_size_mismatch(int64_t hash_block, int64_t block_size);

// `out` is cleared and filled; the caller has checked the sizes.
void block_hashes(const std::vector<int64_t>& ids, int64_t hash_block, int32_t block_size,
                  int32_t prompt_len, std::vector<int64_t>& out);

}  // namespace steptrace
