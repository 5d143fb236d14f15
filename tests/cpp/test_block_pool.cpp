// BlockPool without Python: block order, reference counts, the prefix index, and its check.
#include <stdexcept>
#include <vector>

#include "block_pool.hpp"
#include "check.hpp"
#include "harness.hpp"

using steptrace::BlockPool;

TEST(fresh_pool_hands_out_lowest_ids_first_and_reuses_last_freed_first) {
  BlockPool pool(8);
  std::vector<int32_t> a, b;
  pool.allocate(3, a);
  pool.allocate(2, b);
  EXPECT((a == std::vector<int32_t>{0, 1, 2}) && (b == std::vector<int32_t>{3, 4}));
  EXPECT(pool.num_free() == 3);
  pool.release(a);
  EXPECT(a.empty() && pool.num_free() == 6);
  std::vector<int32_t> c;
  pool.allocate(2, c);
  EXPECT((c == std::vector<int32_t>{2, 1}));
}

TEST(allocating_more_than_is_free_throws_and_changes_nothing) {
  BlockPool pool(2);
  std::vector<int32_t> a;
  EXPECT_THROWS(pool.allocate(3, a), std::logic_error);
  EXPECT(a.empty() && pool.num_free() == 2);
}

TEST(a_shared_block_is_freed_by_its_last_owner) {
  BlockPool pool(4);
  std::vector<int32_t> a, b;
  pool.allocate(1, a);
  pool.share(a[0], b);
  EXPECT(pool.refcount(a[0]) == 2);
  pool.release(a);
  EXPECT(pool.refcount(b[0]) == 1 && pool.num_free() == 3);
  pool.release(b);
  EXPECT(pool.refcount(0) == 0 && pool.num_free() == 4);
}

TEST(an_indexed_block_leaves_the_index_with_its_last_owner) {
  BlockPool pool(4);
  std::vector<int32_t> a, b;
  pool.allocate(2, a);
  pool.index(a[0], 77);
  pool.index(a[1], 77);  // the first writer wins
  EXPECT(pool.lookup(77) == a[0]);
  pool.share(a[0], b);
  pool.release(a);
  EXPECT(pool.lookup(77) == b[0]);
  pool.release(b);
  EXPECT(!pool.lookup(77));
}

TEST(check_accepts_true_owner_counts_and_names_a_wrong_one) {
  BlockPool pool(4);
  std::vector<int32_t> a, b;
  pool.allocate(2, a);
  pool.share(a[1], b);
  pool.check({1, 2, 0, 0});
  if (steptrace::kChecks) {
    EXPECT_THROWS(pool.check({1, 1, 0, 0}), std::logic_error);
    try {
      pool.check({1, 1, 0, 0});
    } catch (const std::logic_error& e) {
      EXPECT(std::string(e.what()).find("block 1 has refcount 2 and 1 owners") !=
             std::string::npos);
    }
  }
}
