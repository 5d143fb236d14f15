#include "scheduler.hpp"

#include <algorithm>
#include <atomic>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

#include "block_hashes.hpp"
#include "steady_clock.hpp"

namespace steptrace {

namespace {

std::atomic<uint64_t> next_scheduler_id{1};

[[noreturn]] void bad_arg(const std::string& message) { throw std::invalid_argument(message); }

// Loops over the running sequences touch one Sequence each, in an order unrelated to their
// place in memory; fetching a few iterations ahead hides most of the cache misses.
constexpr int64_t kPrefetch = 8;
inline void prefetch(const Sequence& s) { __builtin_prefetch(&s); }

}  // namespace

Scheduler::Scheduler(const SchedulerConfig& config, bool retain_finished)
    : config_(config),
      lookahead_(config.lookahead()),
      id_(next_scheduler_id++),
      retain_finished_(retain_finished) {
  config_.validate();
  ranks_.reserve(config_.dp_size);
  for (int32_t r = 0; r < config_.dp_size; ++r)
    ranks_.emplace_back(config_.num_kv_blocks, config_.host_kv_blocks);
}

// ---- requests ---------------------------------------------------------------------------

SeqRecord Scheduler::add_sequence(int64_t seq_id, int64_t prompt_len, int64_t max_new_tokens,
                                  double arrival_time, const std::vector<int64_t>& hash_ids,
                                  int64_t hash_block_size, bool kv_transfer, int64_t session_id) {
  const int64_t hb =
      check_added(seq_id, prompt_len, max_new_tokens, hash_ids, hash_block_size, kv_transfer);
  // Beyond kMaxSeqTokens a request can never run (choice 10): rejected, lengths not kept.
  const int64_t longest = std::max<int64_t>(max_new_tokens, lookahead_);
  const bool too_long = prompt_len > kMaxSeqTokens || longest > kMaxSeqTokens - prompt_len;
  const bool completion = config_.engine_type == EngineType::kCompletion;
  Sequence s;
  s.seq_id = seq_id;
  if (!too_long) {
    s.prompt_len = static_cast<int32_t>(prompt_len);
    s.max_new_tokens = static_cast<int32_t>(max_new_tokens);
    s.footprint = config_.engine_type == EngineType::kPrompt
                      ? s.prompt_len
                      : s.prompt_len + std::max(s.max_new_tokens, lookahead_);
  }
  s.arrival_time = arrival_time;
  s.order = num_added_;
  s.num_tokens = s.prompt_len + (completion ? 1 : 0);
  s.num_cached = completion ? s.prompt_len : 0;
  s.prefill_target = s.prompt_len;
  if (config_.prefix_caching && !hash_ids.empty())
    block_hashes(hash_ids, hb, config_.block_size, s.prompt_len, s.block_hashes);
  s.dp_rank = assign_rank(s, session_id);
  s.session_id = session_id;
  s.blocks_version = next_version_++;

  const int32_t idx = take_slot();
  // the sum as uint64: two int64 lengths may overflow int64
  const std::optional<int64_t> leaves_after =
      place(s, idx,
            too_long ? std::optional<uint64_t>(static_cast<uint64_t>(prompt_len) +
                                               static_cast<uint64_t>(longest))
                     : std::nullopt);
  s.kv_pending = kv_transfer && !leaves_after;  // a request rejected or finished reserves nothing
  SeqRecord added = record_of(s);
  if (static_cast<size_t>(idx) == seqs_.size())
    seqs_.push_back(std::move(s));
  else
    seqs_[idx] = std::move(s);
  index_.emplace(seq_id, idx);
  ++num_added_;
  if (leaves_after) leave(idx, *leaves_after);
  return added;
}

void Scheduler::kv_arrived(int64_t seq_id) {
  auto it = index_.find(seq_id);
  if (it == index_.end()) bad_arg("unknown seq_id " + std::to_string(seq_id));
  Sequence& s = seqs_[it->second];
  if (!s.kv_pending)
    bad_arg("sequence " + std::to_string(seq_id) + " awaits no KV transfer (" +
            status_name(s.status) + ")");
  s.kv_pending = false;
}

void Scheduler::end_session(int64_t session_id) {
  if (session_id < 0) bad_arg("session_id must be >= 0, got " + std::to_string(session_id));
  if (!config_.session_retention) return;
  ended_sessions_.insert(session_id);
  for (Rank& rank : ranks_) rank.pool.unhold(session_id);
}

// add_sequence's arguments checked; the hash block size the ids name.
int64_t Scheduler::check_added(int64_t seq_id, int64_t prompt_len, int64_t max_new_tokens,
                               const std::vector<int64_t>& hash_ids, int64_t hash_block_size,
                               bool kv_transfer) const {
  if (prompt_len < 1) bad_arg("prompt_len must be >= 1, got " + std::to_string(prompt_len));
  if (max_new_tokens < 1)
    bad_arg("max_new_tokens must be >= 1, got " + std::to_string(max_new_tokens));
  if (index_.count(seq_id)) bad_arg("duplicate seq_id " + std::to_string(seq_id));
  if (hash_block_size < 0)
    bad_arg("hash_block_size must be >= 1, got " + std::to_string(hash_block_size));
  const int64_t hb = hash_block_size == 0 ? config_.block_size : hash_block_size;
  if (std::string mismatch = block_size_mismatch(hb, config_.block_size); !mismatch.empty())
    bad_arg(mismatch);
  const int64_t most_blocks = prompt_len / hb + (prompt_len % hb != 0);
  if (static_cast<int64_t>(hash_ids.size()) > most_blocks)
    bad_arg("hash_ids has " + std::to_string(hash_ids.size()) + " entries; a " +
            std::to_string(prompt_len) + "-token prompt has at most " +
            std::to_string(most_blocks) + " blocks of " + std::to_string(hb));
  if (kv_transfer && config_.engine_type != EngineType::kCompletion)
    bad_arg(std::string("kv_transfer=True needs a completion engine; this is a ") +
            kEngineTypes[static_cast<int>(config_.engine_type)] + " engine");
  if (num_added_ == std::numeric_limits<int32_t>::max())
    bad_arg("a scheduler takes at most " + std::to_string(num_added_) + " sequences");
  return hb;
}

// A new sequence rejected (`too_long`: the tokens it needs beyond what a sequence holds,
// or its footprint beyond a rank's pool), finished (a completion engine's one-token
// request) or waiting on its rank; the step after whose postprocess its slot is free.
std::optional<int64_t> Scheduler::place(Sequence& s, int32_t idx,
                                        std::optional<uint64_t> too_long) {
  const int32_t need = blocks_for(s.footprint);
  if (too_long || need > config_.num_kv_blocks) {
    s.status = SeqStatus::kRejected;
    if (too_long)
      s.reason = "needs " + std::to_string(*too_long) +
                 " tokens (prompt_len + max(max_new_tokens, lookahead)) but a sequence holds "
                 "at most " +
                 std::to_string(kMaxSeqTokens);
    else
      s.reason = "needs " + std::to_string(need) + " KV blocks for " + std::to_string(s.footprint) +
                 " tokens (block_size " + std::to_string(config_.block_size) + ") but a rank has " +
                 std::to_string(config_.num_kv_blocks);
    pending_rejected_.push_back(s.seq_id);
    return next_step_;  // the plan that reports it
  }
  if (config_.engine_type == EngineType::kCompletion && s.output_len() >= s.max_new_tokens) {
    s.status = SeqStatus::kFinished;  // arrived with its only token already generated
    return next_step_ - 1;
  }
  Rank& rank = ranks_[s.dp_rank];
  rank.waiting.push_back(idx);
  s.member_pos = static_cast<int32_t>(rank.members.size());
  rank.members.push_back(idx);
  ++num_unfinished_;
  return std::nullopt;
}

int32_t Scheduler::take_slot() {
  if (free_slots_.empty()) return static_cast<int32_t>(seqs_.size());
  const int32_t idx = free_slots_.back();
  free_slots_.pop_back();
  return idx;
}

void Scheduler::leave(int32_t idx, int64_t after_step) {
  if (!retain_finished_) leaving_.push_back({idx, after_step});
}

// A vacant slot must not stay in a decode list, where a later sequence in the same slot
// would appear twice: the finished entries order_for_decode would drop go first.
void Scheduler::free_left_slots() {
  if (leaving_.empty() || leaving_.front().after_step >= next_postprocess_) return;
  for (Rank& rank : ranks_)
    rank.decoding.erase(
        std::remove_if(rank.decoding.begin(), rank.decoding.end(),
                       [this](int32_t idx) { return seqs_[idx].status != SeqStatus::kRunning; }),
        rank.decoding.end());
  while (!leaving_.empty() && leaving_.front().after_step < next_postprocess_) {
    const int32_t idx = leaving_.front().slot;
    leaving_.pop_front();
    Sequence& s = seqs_[idx];
    STEPTRACE_CHECK(s.blocks.empty() && s.num_inflight == 0,
                    "sequence " + std::to_string(s.seq_id) + " leaves with " +
                        std::to_string(s.blocks.size()) + " blocks, " +
                        std::to_string(s.num_inflight) + " tokens in flight");
    index_.erase(s.seq_id);
    s = Sequence{};
    s.order = -1;
    free_slots_.push_back(idx);
  }
}

int32_t Scheduler::assign_rank(const Sequence& s, int64_t session_id) {
  switch (config_.dp_assign) {
    case DpAssign::kRoundRobin: return s.order % config_.dp_size;
    case DpAssign::kLeastLoaded: return least_loaded_rank();
    case DpAssign::kCacheAware: return cache_aware_rank(s);
    case DpAssign::kSessionAffinity: {
      // a session's turn goes where its latest one went; a first turn, or a sequence of
      // no session, by cache_aware
      if (session_id < 0) return cache_aware_rank(s);
      const auto [it, first] = session_rank_.try_emplace(session_id, 0);
      if (first) it->second = cache_aware_rank(s);
      return it->second;
    }
  }
  return 0;
}

// Fewest outstanding tokens: prefill left plus tokens still to generate; ties to the lowest.
int32_t Scheduler::least_loaded_rank() const {
  int32_t best = 0;
  int64_t best_load = std::numeric_limits<int64_t>::max();
  for (int32_t r = 0; r < config_.dp_size; ++r) {
    int64_t load = 0;
    for (int32_t idx : ranks_[r].members) {
      const Sequence& s = seqs_[idx];
      load += std::max(0, s.prefill_target - s.num_cached) + s.max_new_tokens - s.output_len();
    }
    if (load < best_load) {
      best = r;
      best_load = load;
    }
  }
  return best;
}

// SGLang router's cache_aware policy, its defaults, over DP ranks (docs/scheduling.md): the
// load is a rank's unfinished sequences. Imbalanced ranks (the most loaded above the least by
// more than 64 and 1.5 times over) send the sequence to the least loaded; else to the rank
// whose prefix index holds the longest run of its leading prompt blocks (ties: the less
// loaded, then the lower rank) when that run covers more than 30 % of the prompt; else to
// the least loaded.
int32_t Scheduler::cache_aware_rank(const Sequence& s) const {
  constexpr size_t kBalanceAbs = 64;
  constexpr double kBalanceRel = 1.5, kCacheThreshold = 0.3;
  int32_t fewest = 0;
  size_t most = 0;
  for (int32_t r = 0; r < config_.dp_size; ++r) {
    const size_t load = ranks_[r].members.size();
    if (load < ranks_[fewest].members.size()) fewest = r;
    most = std::max(most, load);
  }
  const size_t least = ranks_[fewest].members.size();
  if (most - least > kBalanceAbs && static_cast<double>(most) > kBalanceRel * least) return fewest;
  int32_t best = fewest, best_hit = 0;
  for (int32_t r = 0; r < config_.dp_size; ++r) {
    const int32_t hit = prefix_hit(ranks_[r], s).shared;
    if (hit > best_hit ||
        (hit == best_hit && ranks_[r].members.size() < ranks_[best].members.size())) {
      best = r;
      best_hit = hit;
    }
  }
  const double covered = static_cast<double>(best_hit) * config_.block_size;
  return covered > kCacheThreshold * s.prompt_len ? best : fewest;
}

// ---- schedule ---------------------------------------------------------------------------

bool Scheduler::has_prompt_work() const {
  return std::any_of(ranks_.begin(), ranks_.end(),
                     [this](const Rank& r) { return would_prefill(r); });
}

std::shared_ptr<ScheduleOutput> Scheduler::schedule(std::optional<Phase> vote) {
  const int64_t start = steady_now_ns();
  const bool mixed = config_.mixed_batches;
  if (mixed && vote)
    bad_arg(std::string("a mixed_batches engine holds no vote (every step is one mixed round); "
                        "got phase ") +
            (*vote == Phase::kPrompt ? "prompt" : "decode"));
  bool prompt = config_.engine_type == EngineType::kPrompt;
  if (mixed)
    prompt = false;  // until a rank schedules a prefill token
  else if (config_.engine_type == EngineType::kNormal)
    prompt = vote ? *vote == Phase::kPrompt : has_prompt_work();
  else if (vote && (*vote == Phase::kPrompt) != prompt)
    bad_arg(std::string("a ") + (prompt ? "prompt" : "completion") + " engine cannot run a " +
            (prompt ? "decode" : "prompt") + " round");
  std::shared_ptr<ScheduleOutput> plan = take_plan();
  plan->owner = id_;
  plan->step = next_step_++;
  plan->sched_start_ns = start;

  plan->batches.resize(ranks_.size());
  for (size_t r = 0; r < ranks_.size(); ++r) {
    Rank& rank = ranks_[r];
    Batch& batch = plan->batches[r];
    batch.rank = static_cast<int32_t>(r);
    rank.round_hit_tokens = 0;
    rank.round_reloaded_blocks = 0;
    const int64_t evicted = rank.pool.num_evicted();
    if (mixed) {
      prompt |= mixed_round(rank, batch, plan->preempted);
    } else if (prompt) {
      // Partial prefills are running and new admissions stop at max_num_seqs running.
      Batch::Rows rows = batch.open_rows(
          std::min<size_t>(config_.max_num_seqs, rank.prefilling.size() + rank.waiting.size()));
      prompt_round(rank, rows, config_.max_num_batched_tokens, true);
      batch.close_rows(rows);
      fill_block_tables(batch);
    } else {
      decode_round(rank, batch, plan->preempted);
    }
    batch.kv_blocks_free = rank.pool.num_free();
    batch.num_waiting = static_cast<int32_t>(rank.waiting.size());
    batch.num_running = rank.num_running;
    batch.num_hit_tokens = rank.round_hit_tokens;
    batch.num_reloaded_blocks = rank.round_reloaded_blocks;
    batch.num_evicted_blocks = static_cast<int32_t>(rank.pool.num_evicted() - evicted);
    batch.num_retained_blocks = rank.pool.num_retained();
  }
  plan->phase = prompt ? Phase::kPrompt : Phase::kDecode;
  plan->rejected.swap(pending_rejected_);
  plan->sched_ns = steady_now_ns() - start;
  if constexpr (kChecks) {
    check_rows(*plan);
    check_invariants();
  }
  return plan;
}

std::shared_ptr<ScheduleOutput> Scheduler::take_plan() {
  for (std::shared_ptr<ScheduleOutput>& plan : plans_) {
    if (plan.use_count() != 1 || plan->step >= next_postprocess_) continue;
    // Pairs with the release of the last other holder's count: its reads came first.
    std::atomic_thread_fence(std::memory_order_acquire);
    plan->preempted.clear();
    plan->rejected.clear();
    return plan;
  }
  auto plan = std::make_shared<ScheduleOutput>();
  if (plans_.size() < kPlanPool)
    plans_.push_back(plan);
  else  // every pooled plan is held: let one go to its holders
    plans_[next_evicted_++ % kPlanPool] = plan;
  return plan;
}

bool Scheduler::would_prefill(const Rank& rank) const {
  int32_t idx;
  if (!rank.prefilling.empty()) {
    idx = rank.prefilling.front();
  } else if (!rank.waiting.empty()) {
    if (rank.num_running >= config_.max_num_seqs) return false;
    idx = rank.waiting.front();
  } else {
    return false;
  }
  return next_chunk(rank, seqs_[idx], config_.max_num_batched_tokens).has_value();
}

void Scheduler::prompt_round(Rank& rank, Batch::Rows& rows, int32_t budget, bool admit) {
  candidates_.assign(rank.prefilling.begin(), rank.prefilling.end());
  size_t next_partial = 0;
  while (true) {
    int32_t idx;
    if (next_partial < candidates_.size()) {
      idx = candidates_[next_partial++];
    } else if (admit && !rank.waiting.empty()) {
      if (rank.num_running >= config_.max_num_seqs) return;
      idx = rank.waiting.front();
    } else {
      return;
    }
    if (budget == 0) return;
    Sequence& s = seqs_[idx];
    const std::optional<Chunk> chunk = next_chunk(rank, s, budget);
    if (!chunk) return;

    if (s.status == SeqStatus::kWaiting) {  // admission: shared prefix blocks come first
      for (int32_t i = 0; i < chunk->shared_blocks; ++i)
        rank.pool.share(*rank.pool.lookup(s.block_hashes[i]), s.blocks);
      for (int32_t i = 0; i < chunk->reloaded_blocks; ++i)
        rank.pool.reload(s.block_hashes[chunk->shared_blocks + i]);
      rank.round_reloaded_blocks += chunk->reloaded_blocks;
      s.num_cached = chunk->done;
      s.prefix_hit_tokens += chunk->done;
      rank.round_hit_tokens += chunk->done;
    }
    allocate_blocks(rank, s, chunk->new_blocks);  // a new version for the shared blocks too
    add_row(rows, idx, chunk->q, chunk->padded, s.num_cached + s.num_inflight + chunk->q,
            chunk->final ? kFinal : kChunk);
    s.num_inflight += chunk->q;
    if (s.status == SeqStatus::kWaiting) {
      rank.waiting.pop_front();
      s.status = SeqStatus::kRunning;
      ++rank.num_running;
      if (!chunk->final) {  // keep prefilling in add order
        auto pos = std::upper_bound(
            rank.prefilling.begin(), rank.prefilling.end(), idx,
            [this](int32_t a, int32_t b) { return seqs_[a].order < seqs_[b].order; });
        rank.prefilling.insert(pos, idx);
      }
    } else if (chunk->final) {
      rank.prefilling.erase(std::find(rank.prefilling.begin(), rank.prefilling.end(), idx));
    }
    if (chunk->final) {
      ++s.inflight_samples;
      if (config_.engine_type != EngineType::kPrompt) {
        rank.decoding.push_back(idx);
        rank.decode_sorted = false;
      }
    }
    budget -= chunk->padded;
  }
}

// A sequence being admitted starts after the prompt blocks it can share.
std::optional<Scheduler::Chunk> Scheduler::next_chunk(const Rank& rank, const Sequence& s,
                                                      int32_t budget) const {
  const bool admit = s.status == SeqStatus::kWaiting;
  const PrefixHit hit = admit ? prefix_hit(rank, s) : PrefixHit{};
  const int32_t free = rank.pool.num_free() - hit.revived;  // sharing a retained block takes it
  const int32_t have = admit ? hit.shared : static_cast<int32_t>(s.blocks.size());
  // reloaded blocks are new ones (counted in `need`), their tokens not computed
  const int32_t done =
      admit ? (hit.shared + hit.reloaded) * config_.block_size : s.num_cached + s.num_inflight;
  const int32_t remaining = s.prefill_target - done;
  int32_t q = std::min(remaining, budget);
  if (config_.max_prefill_chunk > 0) q = std::min(q, config_.max_prefill_chunk);
  int32_t padded = q;
  if (config_.cp_size > 1) {
    const int32_t align = 2 * config_.cp_size;
    if (q == remaining) {
      padded = (q + align - 1) / align * align;
      if (padded > budget) q = padded = q / align * align;  // largest aligned non-final chunk
    } else {
      q = padded = q / align * align;
    }
  }
  if (q == 0) return std::nullopt;
  const bool final = q == remaining;
  const int32_t tokens = std::min(done + q + (final ? lookahead_ : 0), s.footprint);
  const int32_t need = new_blocks(have, tokens);
  if (need > free) return std::nullopt;
  if (admit) {
    // Admission reserves what the rank's partial prefills still need to finish, so partial
    // prefills can never hold the pool between them and deadlock.
    int32_t reserved = 0;
    for (int32_t p : rank.prefilling)
      reserved += prefill_blocks(seqs_[p]) - static_cast<int32_t>(seqs_[p].blocks.size());
    if (prefill_blocks(s) - have > free - reserved) return std::nullopt;
  }
  return Chunk{q, padded, need, final, hit.shared, hit.reloaded, done};
}

// A hit never covers the whole prefill: the last block is then computed again, in a block of
// its own, to produce the logits (writing into a shared block would overwrite its owners' KV).
// The host tier's run starts where the device's ends.
Scheduler::PrefixHit Scheduler::prefix_hit(const Rank& rank, const Sequence& s) const {
  const int32_t bs = config_.block_size;
  const int32_t full = static_cast<int32_t>(
      std::min(s.block_hashes.size(), static_cast<size_t>((s.prefill_target - 1) / bs)));
  PrefixHit hit;
  for (; hit.shared < full; ++hit.shared) {
    const std::optional<int32_t> block = rank.pool.lookup(s.block_hashes[hit.shared]);
    if (!block) break;
    hit.revived += rank.pool.refcount(*block) == 0;
  }
  while (hit.shared + hit.reloaded < full &&
         rank.pool.on_host(s.block_hashes[hit.shared + hit.reloaded]))
    ++hit.reloaded;
  return hit;
}

void Scheduler::index_prompt_blocks(Rank& rank, Sequence& s) const {
  const int32_t bs = config_.block_size;
  const int32_t full = std::min(static_cast<int32_t>(s.block_hashes.size()), s.num_cached / bs);
  for (int32_t i = s.num_indexed; i < full; ++i) rank.pool.index(s.blocks[i], s.block_hashes[i]);
  s.num_indexed = std::max(s.num_indexed, full);
}

int32_t Scheduler::prefill_blocks(const Sequence& s) const {
  return blocks_for(std::min(s.prefill_target + lookahead_, s.footprint));
}

// Two passes: the first chooses the rows (allocating and preempting), the second writes their
// seq_ids and block-table rows once the table's width is known (a loop without calls).
void Scheduler::decode_round(Rank& rank, Batch& batch, std::vector<int64_t>& preempted) {
  gather_decode_candidates(rank);
  Batch::Rows rows = batch.open_rows(candidates_.size());
  decode_rows<false>(rank, rows, 1 + config_.num_mtp, 0, preempted);
  write_decode_rows(batch, rows);
  batch.close_rows(rows);
}

// Rule 9.15: the decode round's choice of rows, each costing q of the token budget, then the
// prompt round's candidates with the budget left. A rank that preempted admits nothing new:
// its victims head the queue, which is first come, first served, and they wait for the next
// step. Every row is a distinct running sequence, so rows <= max_num_seqs. Returns whether it
// scheduled a prefill token.
bool Scheduler::mixed_round(Rank& rank, Batch& batch, std::vector<int64_t>& preempted) {
  gather_decode_candidates(rank);
  Batch::Rows rows = batch.open_rows(
      candidates_.size() +
      std::min<size_t>(config_.max_num_seqs, rank.prefilling.size() + rank.waiting.size()));
  const int32_t budget =
      decode_rows<true>(rank, rows, 1 + config_.num_mtp, config_.max_num_batched_tokens, preempted);
  const size_t decodes = rows.n;
  prompt_round(rank, rows, budget, victims_.empty());
  batch.close_rows(rows);
  fill_block_tables(batch);
  return rows.n > decodes;
}

void Scheduler::gather_decode_candidates(Rank& rank) {
  if (config_.engine_type == EngineType::kCompletion) admit_prefilled(rank);
  order_for_decode(rank);
  candidates_.assign(rank.decoding.begin(), rank.decoding.end());  // preempt() edits decoding
}

template <bool kBudget>
int32_t Scheduler::decode_rows(Rank& rank, Batch::Rows& rows, int32_t q, int32_t budget,
                               std::vector<int64_t>& preempted) {
  // Neither vector is resized below: their data stays put across the calls in the loop.
  const int32_t* candidates = candidates_.data();
  Sequence* seqs = seqs_.data();
  int32_t* seq_index = rows.seq_index;
  int32_t* seqlen_k = rows.seqlen_k;
  size_t n = 0;
  int32_t width = 0;  // the most blocks a scheduled sequence holds

  victims_.clear();
  int64_t left = 0, right = static_cast<int64_t>(candidates_.size()) - 1;
  // Once the budget left is below q, the same for every row, the rest wait.
  while (left <= right && (!kBudget || budget >= q)) {
    const int32_t idx = candidates[right];
    if (right >= kPrefetch) prefetch(seqs[candidates[right - kPrefetch]]);
    Sequence& s = seqs[idx];
    if (!wants_token(s)) {  // waits for its KV or in-flight samples; passed over as a victim
      --right;
      continue;
    }
    const int32_t k = s.num_cached + s.num_inflight + q;
    const int32_t have = static_cast<int32_t>(s.blocks.size());
    const int32_t need = new_blocks(have, std::min(k, s.footprint));
    if (need > 0) {
      if (need > rank.pool.num_free()) {
        const int32_t victim = candidates[left++];
        // A victim with work in flight, or KV in transfer, is passed over: both write its blocks.
        if (seqs[victim].num_inflight == 0 && !seqs[victim].kv_pending) {
          preempt(rank, victim);
          victims_.push_back(victim);
        }
        continue;
      }
      allocate_blocks(rank, s, need);
    }
    seq_index[n] = idx;
    seqlen_k[n] = k;
    if constexpr (kBudget) rows.seq_ids[n] = s.seq_id;  // the prompt round's rows follow
    ++n;
    width = std::max(width, have + need);
    s.num_inflight += q;
    ++s.inflight_samples;
    --right;
    if constexpr (kBudget) budget -= q;
  }
  // Preempted sequences go to the front of the queue as a group, in preemption order.
  for (auto it = victims_.rbegin(); it != victims_.rend(); ++it) rank.waiting.push_front(*it);
  for (int32_t idx : victims_) preempted.push_back(seqs_[idx].seq_id);
  rows.n = n;
  rows.table_width = width;
  rows.fill_decode(q);
  return budget;
}

// A decode batch's seq_ids and block tables. Most rows of a recycled plan's table already
// hold their sequence's blocks (Batch::row_marks): only the others are written, afterwards.
void Scheduler::write_decode_rows(Batch& batch, const Batch::Rows& rows) {
  const Sequence* seqs = seqs_.data();
  const size_t n = rows.n;
  const int32_t width = rows.table_width;
  const int32_t* seq_index = rows.seq_index;
  int64_t* seq_ids = rows.seq_ids;
  int32_t* table = batch.open_block_tables(n, width);
  uint64_t* marks = batch.row_marks();
  if (stale_rows_.size() < n) stale_rows_.resize(n);
  uint32_t* stale = stale_rows_.data();
  size_t num_stale = 0;
  for (size_t j = 0; j < n; ++j) {
    const Sequence& s = seqs[seq_index[j]];
    seq_ids[j] = s.seq_id;
    if (marks[j] != s.blocks_version)
      stale[num_stale++] = static_cast<uint32_t>(j);
    else if constexpr (kChecks)
      check_table_row(table + j * width, s, width);
  }
  for (size_t k = 0; k < num_stale; ++k) {
    const uint32_t j = stale[k];
    write_table_row(table + j * width, marks[j], seqs[seq_index[j]], width);
  }
}

// Running sequences in decode order; stable insertion sort, since the order barely changes
// from one round to the next (every decoding sequence gains about one token). The same pass
// drops the sequences that finished since the last round. A list known to be in order
// (Rank::decode_sorted) is left as it is.
void Scheduler::order_for_decode(Rank& rank) const {
  if (rank.decode_sorted) return;
  std::vector<int32_t>& decoding = rank.decoding;
  const bool longest_first = config_.preempt_order == PreemptOrder::kLongestOutput;
  auto before = [&](int32_t out_a, int32_t order_a, int32_t b) {
    const int32_t out_b = seqs_[b].output_len();
    if (out_a != out_b) return longest_first ? out_a > out_b : out_a < out_b;
    return order_a < seqs_[b].order;
  };
  size_t kept = 0;
  int32_t last = -1;  // decoding[kept - 1]: compared with every new entry, so kept at hand
  int32_t last_out = 0, last_order = 0;
  for (size_t i = 0; i < decoding.size(); ++i) {
    if (i + kPrefetch < decoding.size()) prefetch(seqs_[decoding[i + kPrefetch]]);
    const int32_t x = decoding[i];
    const Sequence& s = seqs_[x];
    if (s.status != SeqStatus::kRunning) continue;
    const int32_t out = s.output_len(), order = s.order;
    const bool in_place =
        last < 0 || !(longest_first ? out > last_out || (out == last_out && order < last_order)
                                    : out < last_out || (out == last_out && order < last_order));
    if (in_place) {
      decoding[kept++] = x;
      last = x;
      last_out = out;
      last_order = order;
      continue;
    }
    size_t j = kept++;
    for (; j > 0 && before(out, order, decoding[j - 1]); --j) decoding[j] = decoding[j - 1];
    decoding[j] = x;
  }
  decoding.resize(kept);
  rank.decode_sorted = true;
}

void Scheduler::admit_prefilled(Rank& rank) {
  while (!rank.waiting.empty() && rank.num_running < config_.max_num_seqs) {
    const int32_t idx = rank.waiting.front();
    Sequence& s = seqs_[idx];
    const int32_t tokens = std::min(s.num_cached + lookahead_, s.footprint);
    const int32_t need = new_blocks(static_cast<int32_t>(s.blocks.size()), tokens);
    if (need > rank.pool.num_free()) return;
    allocate_blocks(rank, s, need);
    rank.waiting.pop_front();
    s.status = SeqStatus::kRunning;
    ++rank.num_running;
    rank.decoding.push_back(idx);
    rank.decode_sorted = false;
  }
}

void Scheduler::preempt(Rank& rank, int32_t idx) {
  Sequence& s = seqs_[idx];
  rank.decoding.erase(std::find(rank.decoding.begin(), rank.decoding.end(), idx));
  --rank.num_running;
  s.status = SeqStatus::kWaiting;
  ++s.num_preemptions;
  s.recomputed_tokens += s.num_cached;
  if (config_.engine_type != EngineType::kCompletion) {  // completion: KV is supplied again
    s.num_cached = 0;
    s.prefill_target = s.num_tokens;
    s.num_indexed = 0;
  }
  release_blocks(rank, s);
}

// ---- postprocess ------------------------------------------------------------------------

// postprocess's arguments: the oldest outstanding plan of this scheduler, and drafts
// accepted within each scheduled sequence's.
void Scheduler::check_postprocess(const ScheduleOutput& plan,
                                  const std::vector<int64_t>* accepted) const {
  if (plan.owner != id_) bad_arg("plan was not made by this scheduler");
  if (plan.step < next_postprocess_)
    bad_arg("plan " + std::to_string(plan.step) + " was already post-processed");
  if (plan.step > next_postprocess_)
    bad_arg("plan " + std::to_string(plan.step) +
            " is not the oldest outstanding plan; post-process plan " +
            std::to_string(next_postprocess_) + " first");
  if (accepted) {
    const std::vector<int64_t> limits = flat_limits(plan);
    if (accepted->size() != limits.size())
      bad_arg("accepted has " + std::to_string(accepted->size()) + " values; the plan scheduled " +
              std::to_string(limits.size()) + " sequences");
    for (size_t i = 0; i < limits.size(); ++i)
      if ((*accepted)[i] < 0 || (*accepted)[i] > limits[i])
        bad_arg("accepted[" + std::to_string(i) + "] = " + std::to_string((*accepted)[i]) +
                " is outside 0.." + std::to_string(limits[i]) +
                " (drafts of that scheduled sequence)");
  }
}

PostprocessOutput Scheduler::postprocess(const ScheduleOutput& plan,
                                         const std::vector<int64_t>* accepted) {
  check_postprocess(plan, accepted);
  PostprocessOutput out;
  out.owner = plan.owner;
  out.step = plan.step;
  out.output_len.resize(flat_rows(plan));
  size_t row = 0;
  for (const Batch& batch : plan.batches) {
    Rank& rank = ranks_[batch.rank];
    const size_t n = batch.rows();
    const int32_t* index = batch.seq_index.data();
    const int32_t* seqlen_q = batch.seqlen_q.data();
    const int8_t* kind = batch.kind.data();
    int32_t* output_len = out.output_len.data() + row;
    const int64_t* drafts = accepted ? accepted->data() + row : nullptr;
    // Output lengths are the decode order's keys: the order holds if every sequence in the
    // rank's decode list gained the same number of tokens (rows name distinct sequences, and
    // a sampling row's sequence is in that list or has finished, which clears the flag).
    Gains gains;
    // Most rows are the decode step of a running sequence that it does not finish: a first
    // pass does them. The others follow, in row order. Each row touches only its own
    // sequence (no sequence has two rows) and the others the rank's pool and lists, which
    // decode steps leave alone: the two passes commute.
    if (other_rows_.size() < n) other_rows_.resize(n);
    uint32_t* other = other_rows_.data();
    const size_t num_other =
        drafts ? postprocess_decodes<true>(batch, drafts, output_len, other, gains)
               : postprocess_decodes<false>(batch, nullptr, output_len, other, gains);
    for (size_t k = 0; k < num_other; ++k) {
      const uint32_t j = other[k];
      const int32_t gained = 1 + (drafts ? static_cast<int32_t>(drafts[j]) : 0);
      const int32_t gain = postprocess_row(
          rank, index[j], seqlen_q[j], static_cast<RowKind>(kind[j]), gained, output_len[j], out);
      if (gain > 0) gains.add(gain);
    }
    if (gains.sampled > 0 && (gains.sampled != rank.decoding.size() || gains.least != gains.most))
      rank.decode_sorted = false;
    row += n;
  }
  for (int64_t seq_id : plan.rejected) out.left.push_back(record_of(seq(seq_id)));
  ++next_postprocess_;
  free_left_slots();
  if constexpr (kChecks) check_invariants();
  return out;
}

// postprocess's first pass over a batch: the decode steps that leave their sequence running
// (a prompt engine has none: it runs prompt rounds only). drafts and output_len: the batch's.
// Returns how many other rows it listed in `other`, in row order. Out of line (declared
// noinline: inlined, its loop shares registers with postprocess's calls and spills), and
// without drafts a loop of its own. output_len is written between the sequence's counters:
// four adjacent stores would be merged into one vector store that costs more than it saves.
template <bool kDrafts>
size_t Scheduler::postprocess_decodes(const Batch& batch, const int64_t* drafts,
                                      int32_t* output_len, uint32_t* other, Gains& gains) {
  Sequence* seqs = seqs_.data();
  const size_t n = batch.rows();
  const int32_t* index = batch.seq_index.data();
  const int8_t* kind = batch.kind.data();
  const int32_t q = 1 + config_.num_mtp;  // every decode row's seqlen_q
  int32_t least = std::numeric_limits<int32_t>::max(), most = 0;
  size_t num_other = 0;
  for (size_t j = 0; j < n; ++j) {
    const int32_t idx = index[j];
    if (j + kPrefetch < n) prefetch(seqs[index[j + kPrefetch]]);
    STEPTRACE_CHECK(idx >= 0 && static_cast<size_t>(idx) < seqs_.size() &&
                        seqs_[idx].seq_id == batch.seq_ids[j] && seqs_[idx].order >= 0 &&
                        (kind[j] != kDecode || batch.seqlen_q[j] == q),
                    "row " + std::to_string(j) + " of rank " + std::to_string(batch.rank) +
                        " names sequence " + std::to_string(batch.seq_ids[j]) + " at slot " +
                        std::to_string(idx) + ", seqlen_q " + std::to_string(batch.seqlen_q[j]));
    Sequence& s = seqs[idx];
    const int32_t gained = kDrafts ? 1 + static_cast<int32_t>(drafts[j]) : 1;
    const int32_t tokens = s.num_tokens + gained;
    const int32_t cap = s.prompt_len + s.max_new_tokens;
    if (kind[j] != kDecode || s.status != SeqStatus::kRunning || tokens >= cap) {
      other[num_other++] = static_cast<uint32_t>(j);
      continue;
    }
    s.num_inflight -= q;
    --s.inflight_samples;
    output_len[j] = tokens - s.prompt_len;
    s.num_cached = std::min(s.num_cached + gained, cap);
    s.num_tokens = tokens;  // below cap: the sequence does not finish
    if constexpr (kDrafts) {
      least = std::min(least, gained);
      most = std::max(most, gained);
    }
  }
  const size_t sampled = n - num_other;
  if (sampled > 0) {
    gains.sampled += sampled;
    gains.least = std::min(gains.least, kDrafts ? least : 1);
    gains.most = std::max(gains.most, kDrafts ? most : 1);
  }
  return num_other;
}

// Any row but a decode step that leaves its sequence running; returns the tokens the
// sequence gained (0 for a chunk, or work discarded).
int32_t Scheduler::postprocess_row(Rank& rank, int32_t idx, int32_t q, RowKind kind, int32_t gained,
                                   int32_t& output_len, PostprocessOutput& out) {
  Sequence& s = seqs_[idx];
  s.num_inflight -= q;
  if (s.status == SeqStatus::kFinished) {  // finished while this work was in flight
    out.discarded_tokens += q;
    output_len = s.output_len();
    if (s.num_inflight == 0) release_blocks(rank, s);
    return 0;
  }
  if (kind == kChunk) {
    s.num_cached += q;
    output_len = s.output_len();
    if (!s.block_hashes.empty()) index_prompt_blocks(rank, s);
    return 0;
  }
  --s.inflight_samples;
  const int32_t cap = s.prompt_len + s.max_new_tokens;
  const int32_t before = s.num_tokens;
  s.num_cached = std::min(s.num_cached + (kind == kFinal ? q : gained), cap);
  s.num_tokens = std::min(s.num_tokens + gained, cap);
  if (kind == kFinal && !s.block_hashes.empty()) index_prompt_blocks(rank, s);
  output_len = s.output_len();
  const int32_t gain = s.num_tokens - before;
  if (config_.engine_type == EngineType::kPrompt || s.output_len() >= s.max_new_tokens) {
    out.left.push_back(record_of(s));  // before finish(), which may let it go
    out.left.back().status = SeqStatus::kFinished;
    finish(rank, idx);
    out.finished.push_back(out.left.back().seq_id);
  }
  return gain;
}

size_t Scheduler::flat_rows(const ScheduleOutput& plan) {
  size_t rows = 0;
  for (const Batch& batch : plan.batches) rows += batch.rows();
  return rows;
}

SeqRecord Scheduler::record_of(const Sequence& s) const {
  return SeqRecord{s.seq_id,
                   s.dp_rank,
                   s.status,
                   s.output_len(),
                   s.num_preemptions,
                   s.recomputed_tokens,
                   s.prefix_hit_tokens,
                   s.reason,
                   id_};
}

std::vector<int64_t> Scheduler::flat_limits(const ScheduleOutput& plan) const {
  std::vector<int64_t> limits;
  for (const Batch& batch : plan.batches)
    for (size_t j = 0; j < batch.rows(); ++j)
      limits.push_back(batch.kind[j] == kDecode ? batch.seqlen_q[j] - 1 : 0);
  return limits;
}

void Scheduler::finish(Rank& rank, int32_t idx) {
  Sequence& s = seqs_[idx];
  --rank.num_running;
  // Swap-remove from the rank's unfinished members; finished sequences leave `decoding`
  // at the next decode round.
  const int32_t last = rank.members.back();
  rank.members[s.member_pos] = last;
  seqs_[last].member_pos = s.member_pos;
  rank.members.pop_back();
  s.member_pos = -1;
  --num_unfinished_;
  s.status = SeqStatus::kFinished;
  rank.decode_sorted = false;  // it stays in `decoding` until the next sort drops it
  if (s.num_inflight == 0) release_blocks(rank, s);
  leave(idx, next_step_ - 1);  // the newest plan may still name it
}

// ---- metadata and queries ---------------------------------------------------------------

void Scheduler::fill_block_tables(Batch& batch) const {
  const int32_t width = batch.table_width;
  const size_t n = batch.rows();
  int32_t* table = batch.open_block_tables(n, width);
  uint64_t* marks = batch.row_marks();
  for (size_t j = 0; j < n; ++j)
    write_table_row(table + j * width, marks[j], seqs_[batch.seq_index[j]], width);
}

const Sequence& Scheduler::seq(int64_t seq_id) const { return seqs_[index_of(seq_id)]; }

int32_t Scheduler::index_of(int64_t seq_id) const {
  auto it = index_.find(seq_id);
  if (it != index_.end()) return it->second;
  if (!retain_finished_)  // a left id is forgotten: it cannot be told from one never added
    throw SequenceLeft("sequence " + std::to_string(seq_id) +
                       " has left the scheduler (or was never added)");
  bad_arg("unknown seq_id " + std::to_string(seq_id));
}

int32_t Scheduler::refcount(int64_t block, int64_t rank) const {
  if (block < 0 || block >= config_.num_kv_blocks)
    bad_arg("block " + std::to_string(block) + " is outside 0.." +
            std::to_string(config_.num_kv_blocks - 1));
  return rank_at(rank).pool.refcount(static_cast<int32_t>(block));
}

int32_t Scheduler::num_free_blocks(int64_t rank) const { return rank_at(rank).pool.num_free(); }

const Scheduler::Rank& Scheduler::rank_at(int64_t rank) const {
  if (rank < 0 || rank >= config_.dp_size)
    bad_arg("rank " + std::to_string(rank) + " is outside 0.." +
            std::to_string(config_.dp_size - 1));
  return ranks_[rank];
}

}  // namespace steptrace
