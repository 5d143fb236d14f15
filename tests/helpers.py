"""One way to build schedulers in tests: real objects from tiny configs."""

from engine import ReferenceScheduler, Scheduler, SchedulerConfig

IMPLS = ("cpp", "reference")

# The worked examples' configuration (SCHEDULING.md section 3): KV ample, budget 16.
BASE = dict(max_num_batched_tokens=16, max_num_seqs=256, num_kv_blocks=1024, block_size=16)


def make_scheduler(impl="cpp", **overrides):
    cfg = SchedulerConfig(**{**BASE, **overrides})
    return Scheduler(cfg) if impl == "cpp" else ReferenceScheduler(cfg)


def make_requests(sched, *specs, start_id=0):
    """Add (prompt_len, max_new_tokens) pairs as sequences start_id, start_id + 1, ..."""
    for i, (prompt_len, max_new_tokens) in enumerate(specs):
        sched.add_sequence(seq_id=start_id + i, prompt_len=prompt_len,
                           max_new_tokens=max_new_tokens, arrival_time=float(i))
    return list(range(start_id, start_id + len(specs)))


def rows(plan, rank=0):
    """(seq_id, seqlen_q, seqlen_k) per scheduled row of one rank, in batch order."""
    b = plan.batches[rank]
    return list(zip(b.seq_ids.tolist(), b.seqlen_q.tolist(), b.seqlen_k.tolist()))
