"""Type stub for the C++ scheduler core (csrc/bindings/bindings.cpp)."""

import enum
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence as Seq, Tuple, Union

import numpy as np
import numpy.typing as npt

from .config import SchedulerConfig
from .model_config import ModelConfig

def scheduler_config_fields() -> list[dict]:
    """SchedulerConfig's fields (csrc/config.hpp, for_each_field): name, type, default,
    minimum, choices, doc."""
def check_scheduler_config(config: object) -> None: ...
MAX_SEQ_TOKENS: int  # prompt_len + max(max_new_tokens, lookahead) a sequence may need
def scheduler_config_lookahead(config: object) -> int: ...
def model_geometry_fields() -> list[str]:
    """The ModelConfig fields the C++ cost model reads (csrc/cost_model.hpp)."""
def _spin(ns: int, release_gil: bool = True) -> None:
    """Test only: spin for ns nanoseconds in C++, the GIL released unless release_gil=False."""

class Sequence:
    seq_id: int
    prompt_len: int
    max_new_tokens: int
    arrival_time: float
    dp_rank: int
    num_tokens: int
    num_cached: int
    num_inflight: int
    prefill_target: int
    footprint: int
    blocks: list[int]
    num_preemptions: int
    recomputed_tokens: int
    reason: str
    prefix_hit_tokens: int
    kv_pending: bool  # KV in transfer (completion engine): admitted or not, computes nothing
    @property
    def output_len(self) -> int: ...
    @property
    def status(self) -> str: ...  # "waiting" | "running" | "finished" | "rejected"

class Batch:
    rank: int
    seq_ids: npt.NDArray[np.int64]
    seqlen_q: npt.NDArray[np.int32]
    seqlen_k: npt.NDArray[np.int32]
    padded_q: npt.NDArray[np.int32]
    kind: npt.NDArray[np.int8]
    block_tables: npt.NDArray[np.int32]
    empty: bool
    kv_blocks_free: int
    num_waiting: int
    num_running: int
    num_hit_tokens: int
    num_reloaded_blocks: int
    num_evicted_blocks: int
    num_retained_blocks: int
    def __len__(self) -> int: ...

class Plan:
    step: int
    phase: str  # "prompt" | "decode"
    batches: list[Batch]
    preempted: npt.NDArray[np.int64]
    rejected: npt.NDArray[np.int64]
    sched_start_ns: int
    sched_ns: int

class SeqRecord:
    """What the requests table needs of a sequence (engine.plan.SeqRecord)."""
    seq_id: int
    dp_rank: int
    status: str  # "waiting" | "finished" | "rejected"
    output_len: int
    num_preemptions: int
    recomputed_tokens: int
    prefix_hit_tokens: int
    reason: str

class PostprocessResult:
    step: int
    finished: npt.NDArray[np.int64]
    discarded_tokens: int
    output_len: npt.NDArray[np.int32]  # per scheduled row, rank-then-batch order
    left: list[SeqRecord]  # finished or handed off here, then the plan's rejected

class SequenceLeft(KeyError):
    """seq() of an id the scheduler no longer holds (retain_finished=False)."""

class Scheduler:
    """Calls from several threads are serialised: schedule() releases the GIL, the others
    wait for it (docs/reliability.md)."""
    num_outstanding_plans: int
    num_slots: int  # sequence slots, vacant ones included
    num_live: int  # sequences seq() can name
    retain_finished: bool
    def __init__(self, config: SchedulerConfig, retain_finished: bool = True) -> None: ...
    def add_sequence(self, seq_id: int, prompt_len: int, max_new_tokens: int,
                     arrival_time: float = 0.0,
                     hash_ids: Optional[Seq[int]] = None,
                     hash_block_size: Optional[int] = None,
                     kv_transfer: bool = False, session_id: int = -1) -> SeqRecord: ...
    def kv_arrived(self, seq_id: int) -> None: ...
    def end_session(self, session_id: int) -> None: ...
    def schedule(self, release_gil: bool = True, phase: Optional[str] = None) -> Plan: ...
    def has_prompt_work(self) -> bool: ...
    def postprocess(self, plan: Plan,
                    accepted: Optional[Union[Seq[int], Seq[Seq[int]], Seq[np.ndarray],
                                             np.ndarray]] = None,
                    release_gil: bool = False) -> PostprocessResult: ...
    def seq(self, seq_id: int) -> Sequence: ...
    def num_free_blocks(self, rank: int = 0) -> int: ...
    def refcount(self, block: int, rank: int = 0) -> int: ...
    def is_finished(self) -> bool: ...

class StepCost:
    """One batch's FlopsEstimator.calc_flops totals."""
    model_flops: float
    executed_flops: float
    bytes: float
    # a deployment's parts on this rank, in seconds: modeled (DeploymentModel), measured
    # on a torch device (engine/step_parts.py, with_parts); 0 elsewhere
    attention_s: float
    dense_s: float
    experts_s: float
    dispatch_s: float
    combine_s: float
    allreduce_s: float
    # of dense_s: what ran on a second stream beside the routed experts' path
    aux_s: float
    # the rank's own modeled step, before it waits for the slowest rank (0: not modeled)
    rank_s: float
    # bit i: part i (attention, dense, experts, dispatch, combine, allreduce) looked up
    # outside its kernel table's rows
    extrapolated: int
    def __init__(self, model_flops: float, executed_flops: float, bytes: float,
                 rank_s: float = 0.0) -> None: ...
    def with_parts(self, attention_s: float, dense_s: float, experts_s: float,
                   dispatch_s: float, combine_s: float) -> StepCost:
        """A copy with the parts' seconds measured on a real device."""

class CostModel:
    """FlopsEstimator.calc_flops's totals, in C++ (FlopsEstimator.cost_model())."""
    def __init__(self, model: ModelConfig, weight_bytes: float, expert_weight_bytes: float,
                 kv_bytes: float, index_kv_bytes: float) -> None: ...
    def batch(self, batch: Batch, accepted: Optional[npt.NDArray[np.int64]] = None,
              mtp: bool = False) -> StepCost: ...
    def plan(self, plan: Plan, mtp: bool = False) -> list[StepCost]: ...

class DeploymentRates:
    """The DeploymentModel's inputs (engine.executors.modeled.deployment_rates)."""
    devices: int
    attention_tp: int
    dense_tp: int
    moe_ep: int
    moe_tp: int
    micro_batches: int
    scaleup_devices: int
    local_experts: float
    expert_imbalance: float
    hidden: float
    dispatch_bytes: float
    combine_bytes: float
    layers: float
    attention_flops_per_s: float
    dense_flops_per_s: float
    expert_flops_per_s: float
    hbm_bytes_per_s: float
    scaleup_bytes_per_s: float
    scaleout_bytes_per_s: float
    scaleup_latency_s: float
    scaleout_latency_s: float
    overhead_s: float
    layer_floor_s: float  # the least a busy rank's layer takes; 0: none
    kernels: Optional[KernelStep]  # the parts kernel tables time (engine/kernels/step.py)
    def __init__(self) -> None: ...

class KernelCurve:
    """One kernel table curve (engine/kernels/lookup.py's rule, in C++)."""
    def __init__(self, tokens: Seq[float], contexts: Seq[float],
                 times_us: Seq[float]) -> None: ...
    def seconds(self, tokens: float, context: float = 0.0) -> Tuple[float, bool]: ...

class Quantity(enum.Enum):
    tokens = ...
    decode_rows = ...
    decode_tokens = ...
    prefill_row = ...
    prefill_tokens = ...
    logits = ...
    group_tokens = ...
    sent_tokens = ...

class Part(enum.Enum):
    attention = ...
    dense = ...
    experts = ...
    dispatch = ...
    combine = ...
    allreduce = ...

class When(enum.Enum):
    always = ...
    decode_only = ...
    with_prefill = ...

class KernelTerm:
    def __init__(self, curve: KernelCurve, quantity: Quantity, part: Part, when: When,
                 calls: float, per_layer: bool, scale: float = 1.0,
                 substitute: bool = False, aux: bool = False) -> None: ...

class KernelStep:
    def __init__(self, terms: Seq[KernelTerm], micro_batches: int,
                 mtp_layers_per_layer: float, decode_layer_scale: float = 1.0) -> None: ...

class StepCosts:
    """Every rank's StepCost of one step, held in C++ (DeploymentModel.step)."""
    def __len__(self) -> int: ...
    def __getitem__(self, rank: int, /) -> StepCost: ...
    def __iter__(self) -> Iterator[StepCost]: ...

class Roofline:
    """A device profile's effective rates, for a modeled run without a deployment."""
    flops_per_s: float
    bytes_per_s: float
    overhead_s: float  # one step
    floor_s: float  # the least a busy rank's layers take; 0: none
    def __init__(self, flops_per_s: float, bytes_per_s: float, overhead_s: float,
                 floor_s: float) -> None: ...

class ModeledStep:
    """The modeled executor's step (csrc/replay/modeled_step.hpp): MTP drafts accepted from
    numpy's PCG64 stream of `rng_state`, then the deployment's model or the roofline, then
    the slowest rank's reloads from the host KV tier."""
    def __init__(self, cost: CostModel, deployment: Optional[DeploymentRates],
                 roofline: Roofline, mtp: bool, acceptance: float,
                 rng_state: Mapping[str, Any], reload_s_per_block: float = 0.0) -> None: ...
    def execute(self, plan: Plan) -> tuple[float, StepCosts,
                                           Optional[list[npt.NDArray[np.int64]]]]: ...

class StepTimes:
    """What LLMEngine measured around one step (perf_counter_ns), read-only; the C++ step
    log reads it from StepRecord.times."""
    start_ns: int  # when the step's schedule() was called
    sched_call_ns: int  # the call as Python sees it, GIL reacquire included
    forward_ns: int
    sample_ns: int
    postprocess_ns: int
    step_ns: int  # schedule() start to postprocess() end
    @staticmethod
    def of(start_ns: int, sched_call_ns: int, forward_ns: int, sample_ns: int,
           postprocess_ns: int, step_ns: int) -> StepTimes:
        """The one way to build one (no constructor: a static function costs pybind11 half
        as much, and the engine builds one every step)."""

class PdColumns:
    """A request's P/D columns, read (StepLog.handed); StepLog.set_handed writes them."""
    prefill_instance: int
    decode_instance: int
    kv_bytes: float
    handoff_s: float
    transfer_start_s: float
    transfer_end_s: float
    decode_wait_s: float

class StepLog:
    """The recorder's core (harness/recorder.py): step, batch and request rows, token times.
    Fed only records; it holds no scheduler."""
    num_done: int
    num_live: int
    def __init__(self, warmup_steps: int, chunk_steps: int, on_full: Callable[[], None],
                 handoff: str = "none", instance: int = 0) -> None:
        """handoff: `none`, `row` (a prompt engine's) or `kept` (a P/D prefill instance's
        in one process with the decode instances); instance: its index in its pool."""
    @staticmethod
    def columns() -> dict[str, list[str]]: ...
    def enqueue(self, added: SeqRecord, t: float,
                handed_by: Optional[StepLog] = None) -> None:
        """ValueError for a record of another scheduler than the earlier ones, or one
        `handed_by` (a `kept` log) did not hand off."""
    def handed(self, seq_id: int) -> PdColumns:
        """A copy of its P/D columns; IndexError unless this `kept` log handed it off and
        no log took it in yet."""
    def set_handed(self, seq_id: int, **columns: float) -> None:
        """The named P/D columns set, before a log takes the request in or end() writes
        it; IndexError as handed(), TypeError for a name that is not a column."""
    def record(self, record: object, t_start: float, t_end: float) -> None:
        """`record` is an llm_engine.StepRecord (its plan, post, times and flops are read).
        ValueError for a record of another scheduler; TypeError for times that are not a
        StepTimes; RuntimeError if another record() of this log is running (from on_full
        or another thread)."""
    def end(self) -> None: ...
    def take_steps(self) -> dict[str, np.ndarray]: ...
    def take_batches(self) -> dict[str, np.ndarray]: ...
    def take_requests(self) -> dict[str, Union[np.ndarray, list[str]]]: ...
    def itl(self) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int64]]: ...

def replay_virtual(scheduler: Scheduler, step: ModeledStep, log: StepLog,
                   arrival_s: npt.ArrayLike, prompt_len: npt.ArrayLike,
                   max_new_tokens: npt.ArrayLike, hash_offsets: Optional[npt.ArrayLike] = None,
                   hash_ids: Optional[npt.ArrayLike] = None, hash_block_size: int = 0,
                   concurrency: int = 0, released_s: Optional[np.ndarray] = None,
                   sessions: Optional[tuple] = None,
                   overlap: bool = False, progress_every: int = 64, *,
                   on_progress: Callable[[int, int], bool]) -> bool:
    """The C++ replay loop (harness/replay/native.py): True if completed. `sessions`: a
    session trace's (parent, gap_s, subagent, session_id, live), its turns' arrivals
    written into released_s."""

class SessionTurns:
    """A session trace's turns, released as their parents end (csrc/replay/
    session_turns.hpp): the Python P/D loop's."""
    def __init__(self, sessions: tuple, arrival_s: npt.ArrayLike) -> None: ...
    def next_s(self) -> float:
        """The next turn's arrival (inf: none is left to come)."""
    def take_due(self, now: float) -> Optional[Tuple[float, int]]:
        """(arrival, row) of the next turn due by `now`, taken; None: none is."""
    def ended(self, row: int, t: float) -> int:
        """Turn `row`'s last token is out, or it was rejected, at t (again: nothing); the
        session that has thereby ended, every turn of it, or -1."""

class PdService:
    """What the C++ P/D loop needs of a deployment (harness/replay/native.py fills it)."""
    prefill_router: str
    decode_router: str
    capacity_blocks: int  # a prefill instance's KV blocks (the cache-aware record's)
    block_size: int
    kv_bytes_per_token: float
    layers: float  # main and MTP layers
    sender_bps: float  # one DP rank's link, prefill side
    receiver_bps: float  # decode side
    latency_s: float
    layerwise: bool
    def __init__(self) -> None: ...

def replay_disaggregated(instances: list, arrival_s: npt.ArrayLike, prompt_len: npt.ArrayLike,
                         max_new_tokens: npt.ArrayLike,
                         hash_offsets: Optional[npt.ArrayLike] = None,
                         hash_ids: Optional[npt.ArrayLike] = None, hash_block_size: int = 0,
                         concurrency: int = 0, released_s: Optional[np.ndarray] = None,
                         sessions: Optional[tuple] = None, *, service: PdService, progress_every: int = 64,
                         on_progress: Callable[[int, int], bool]) -> bool:
    """The C++ P/D loop (harness/replay/native.py): True if completed. `instances`:
    (role, index, scheduler, step, log) of each, prefill instances first, a prefill
    instance's log `kept`."""

class PrefillRouter:
    """A P/D deployment's prefill router (docs/disaggregation.md, "Routers"): round_robin,
    least_tokens, cache_aware or session_affinity; the C++ loop's own."""
    def __init__(self, policy: str, instances: int, capacity_blocks: int,
                 block_size: int) -> None: ...
    def route(self, prompt_len: int, hashes: Seq[int], session: int = -1) -> int:
        """The instance a request goes to; its load counted there. session: the session
        whose turn it is (-1: none; session_affinity)."""
    def hashes(self, hash_ids: Optional[Seq[int]], hash_block_size: Optional[int],
               prompt_len: int) -> list[int]:
        """A request's chained block hashes, as cache_aware routes by them (none for
        another policy)."""
    def prefilled(self, instance: int, prompt_len: int) -> None:
        """A request routed to `instance` left it (handed off or rejected)."""

class DecodeRouter:
    """A P/D deployment's decode router: round_robin or least_kv."""
    def __init__(self, policy: str, instances: int) -> None: ...
    def route(self, free_blocks: Seq[int]) -> int:
        """The instance a prefilled sequence goes to; `free_blocks` per instance, less
        those awaited there (least_kv)."""

def awaited_blocks(prompt_lens: Seq[int], block_size: int) -> int:
    """The KV blocks the prompts of sequences routed to a decode instance and not yet
    admitted will take there."""
