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

TEST(an_indexed_block_is_retained_until_evicted_least_recently_used) {
  BlockPool pool(4);
  std::vector<int32_t> a, b, c;
  pool.allocate(3, a);  // 0 1 2
  pool.index(a[0], 70);
  pool.index(a[1], 71);
  pool.index(a[2], 71);  // the first writer wins: block 2 stays unindexed
  EXPECT(pool.lookup(71) == a[1]);
  pool.share(a[0], b);
  pool.release(a);  // 1 retained; 2 freed; 0 still owned by b
  EXPECT(pool.num_free() == 3 && pool.num_retained() == 1 && pool.lookup(71) == 1);
  pool.release(b);  // 0 retained after 1
  EXPECT(pool.num_retained() == 2 && pool.lookup(70) == 0);
  pool.check({0, 0, 0, 0});
  pool.allocate(3, c);  // unindexed 2 then 3, then the oldest retained: 1
  EXPECT((c == std::vector<int32_t>{2, 3, 1}));
  EXPECT(!pool.lookup(71) && pool.lookup(70) == 0 && pool.num_evicted() == 1);
  pool.share(0, c);  // a retained block shared leaves the retained list
  EXPECT(pool.num_free() == 0 && pool.num_retained() == 0);
  pool.check({1, 1, 1, 1});
}

TEST(a_release_retains_an_owners_later_blocks_first) {
  BlockPool pool(3);
  std::vector<int32_t> a, b;
  pool.allocate(3, a);
  for (int32_t i = 0; i < 3; ++i) pool.index(a[i], 80 + i);
  pool.release(a);  // retained 2 1 0: the last block is evicted first
  pool.allocate(2, b);
  EXPECT((b == std::vector<int32_t>{2, 1}) && pool.lookup(80) == 0);
}

TEST(hashes_sharing_a_home_slot_stay_found_as_others_leave) {
  BlockPool pool(4);  // 8 slots: 1, 9 and 17 share home slot 1, 2 is displaced by them
  std::vector<int32_t> a, b;
  pool.allocate(4, a);
  const int64_t hashes[] = {1, 9, 2, 17};
  for (int32_t i = 0; i < 4; ++i) pool.index(a[i], hashes[i]);
  pool.release(a);  // retained 3 2 1 0: 17 leaves first, then 2, 9, 1
  pool.allocate(1, b);
  EXPECT(!pool.lookup(17) && pool.lookup(1) == 0 && pool.lookup(9) == 1 && pool.lookup(2) == 2);
  pool.allocate(2, b);
  EXPECT(!pool.lookup(2) && !pool.lookup(9) && pool.lookup(1) == 0);
  pool.check({0, 1, 1, 1});
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

TEST(held_blocks_are_evicted_last_until_their_session_ends) {
  BlockPool pool(4);
  std::vector<int32_t> a, b, c, d;
  pool.allocate(2, a);  // 0 1
  pool.allocate(2, b);  // 2 3
  for (int32_t k = 0; k < 4; ++k) pool.index(k, 80 + k);
  pool.release(a, 7);  // held for session 7
  pool.release(b);     // plain, yet released later
  EXPECT(pool.num_retained() == 4 && pool.num_held() == 2 && pool.num_free() == 4);
  pool.check({0, 0, 0, 0});
  pool.allocate(2, c);  // the plain ones first (later block first): 3 2
  EXPECT((c == std::vector<int32_t>{3, 2}) && pool.num_held() == 2);
  pool.unhold(7);  // plain now
  EXPECT(pool.num_held() == 0 && pool.num_retained() == 2);
  pool.check({0, 0, 1, 1});
  pool.allocate(1, d);
  EXPECT((d == std::vector<int32_t>{1}));
}

TEST(evicted_blocks_go_to_the_host_tier_oldest_dropped_first) {
  BlockPool pool(2, 2);
  std::vector<int32_t> a, b;
  pool.allocate(2, a);
  pool.index(0, 90);
  pool.index(1, 91);
  pool.release(a);  // retained 1 0
  pool.allocate(2, b);  // evicts 1 then 0: the host tier holds 91 90
  EXPECT(pool.on_host(90) && pool.on_host(91) && pool.num_host() == 2);
  pool.index(b[0], 92);
  pool.reload(91);  // 91 is now the newest: 90 goes first
  pool.release(b);  // block 1 (hash 92) retained, block 0 freed
  std::vector<int32_t> c;
  pool.allocate(2, c);  // block 0, then evicts block 1: 90 dropped
  EXPECT(!pool.on_host(90) && pool.on_host(91) && pool.on_host(92) && pool.num_host() == 2);
  pool.check({1, 1});
}
