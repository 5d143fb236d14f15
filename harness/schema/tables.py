"""The result tables of a run directory, each column declared once.

`defined` names the section of docs/ that defines a derived value (a metric, a FLOPs
count, a device reading); docs/tables.md links to it instead of defining it again.
"""

from __future__ import annotations

import math

import pyarrow as pa

from .column import BOOL, CODES, F64, I32, I64, TEXT, Column, Table, col as _col
from .frontier_tables import FRONTIER_TABLES

WORK = "metrics.md#work-per-step"
PER_REQUEST = "metrics.md#per-request"
DECODE_STALL = "metrics.md#decode-stall"
INPUTS = "metrics.md#inputs-per-request-from-the-recorder"
DEVICE_COLUMNS = "telemetry.md#columns"
STEP_PARTS = "modeling.md#the-step"
KERNEL_TABLES = "modeling.md#kernel-tables"
DP_IMBALANCE = "metrics.md#dp-imbalance"
FRONTEND = "metrics.md#frontend"
GIL_DOC = "gil.md#the-protocol"
CAPACITY_DOC = "capacity.md#the-search"
SESSIONS = "workloads.md#sessions"
NAN = math.nan


# The labels the table sink adds to every table of a run, one value per run.
LABELS = {c.name: c for c in (
    _col("run_id", CODES, "", "the run directory's name"),
    _col("gil_mode", CODES, "", "the run's GIL arm: `released` or `held`; in a sweep also "
         "`released_aa` (released, the A/A arm) or `postprocess_released` (docs/gil.md)"),
    _col("overlap", BOOL, "", "forward and sampling ran on a worker thread, overlapping the "
         "next step (workload key `engine.overlap`)"),
)}

DISAGGREGATION = "disaggregation.md#what-is-recorded"
ROLES = ("colocated", "prefill", "decode")
_INSTANCE = (
    _col("role", CODES, "", "the instance's pool: `colocated` (one instance doing both), "
         "`prefill` or `decode` (a P/D deployment)", DISAGGREGATION, values=ROLES),
    _col("instance", I32, "", "the instance within its pool, from 0", DISAGGREGATION),
)

STEPS = Table("steps", "engine step and DP rank of an instance (idle ranks' rows are left "
              "out: see below)",
              "by step, then dp_rank, each instance's rows in its own step order", (
    *_INSTANCE,
    _col("step", I64, "", "the plan's step number, from 0 on each instance"),
    _col("dp_rank", I32, "", "the data-parallel rank whose batch this row describes"),
    _col("phase", CODES, "", "the plan's phase (a step is one or the other on every rank)",
         values=("decode", "prompt")),
    _col("empty", BOOL, "", "the rank scheduled nothing this step"),
    _col("warmup", BOOL, "", "a warm-up step: step < the workload's `warmup_steps`"),
    _col("num_seqs", I32, "", "sequences scheduled on the rank"),
    _col("tokens_q", I64, "tokens", "real tokens computed: the sum of the batch's seqlen_q"),
    _col("padded_tokens_q", I64, "tokens", "tokens run, padding included: the sum of "
         "padded_q"),
    _col("prefill_tokens_q", I64, "tokens", "of tokens_q, the prefill rows' (`chunk` and "
         "`final`): a prompt round's all, a decode round's none, a mixed round's its "
         "chunks'"),
    _col("sum_seqlen_k", I64, "tokens", "keys visible to the batch: the sum of its seqlen_k"),
    _col("max_seqlen_k", I32, "tokens", "the longest row's seqlen_k"),
    _col("preempted", I32, "", "sequences the plan preempted"),
    _col("rejected", I32, "", "sequences rejected since the previous plan"),
    _col("finished", I32, "", "sequences that finished or were handed off in the step's "
         "postprocess"),
    _col("discarded_tokens", I64, "tokens", "in-flight work of already finished sequences, "
         "thrown away in postprocess"),
    _col("kv_blocks_free", I32, "blocks", "the rank's free KV blocks after the round"),
    _col("waiting", I32, "", "the rank's waiting sequences after the round"),
    _col("running", I32, "", "the rank's running sequences after the round"),
    _col("prefix_hit_tokens", I32, "tokens", "prompt tokens the round's admissions found in "
         "the prefix cache, not computed"),
    _col("kv_blocks_reloaded", I32, "blocks", "of the blocks of those tokens, those reloaded "
         "from the host KV tier (host_kv_blocks)"),
    _col("kv_blocks_evicted", I32, "blocks", "retained blocks the round's allocations evicted "
         "from the prefix cache"),
    _col("kv_blocks_retained", I32, "blocks", "of the free blocks after the round, those held "
         "only by the prefix cache"),
    _col("t_start_s", F64, "s", "when the step's schedule() was called, on the run's clock"),
    _col("t_end_s", F64, "s", "when its postprocess() returned, on the run's clock"),
    _col("sched_cpp_ns", I64, "ns", "time inside the C++ schedule()"),
    _col("sched_call_ns", I64, "ns", "the schedule() call as Python sees it, binding and "
         "GIL reacquire included"),
    _col("forward_ns", I64, "ns", "the forward (modeled: the device model's time)"),
    _col("sample_ns", I64, "ns", "sampling (modeled: the device model's time)"),
    _col("postprocess_ns", I64, "ns", "postprocess(): committing tokens, freeing blocks"),
    _col("step_ns", I64, "ns", "schedule() start to postprocess() end"),
    _col("flush_ns", I64, "ns", "time the engine's thread spent handing finished chunks to "
         "the table writer during this step; 0 on other steps"),
    _col("model_flops", F64, "FLOP", "the work the step needed", WORK),
    _col("executed_flops", F64, "FLOP", "the work the step ran: padding, rejected drafts, "
         "re-up-projection and the MTP module included", WORK),
    _col("bytes", F64, "bytes", "what the executed step moves through device memory", WORK),
    _col("attention_s", F64, "s", "the attention layers on one device of the rank: modeled "
         "(a deployment), or measured on a torch device; 0 elsewhere", STEP_PARTS),
    _col("dense_s", F64, "s", "dense FFN, shared experts, router (and LM head, modeled) on "
         "one device of the rank: modeled, or measured on a torch device", STEP_PARTS),
    _col("experts_s", F64, "s", "the routed experts: modeled, of the hottest device; measured, the "
         "rank's own",
         STEP_PARTS),
    _col("dispatch_s", F64, "s", "the rank's dispatch all-to-alls, modeled or measured",
         STEP_PARTS),
    _col("combine_s", F64, "s", "the rank's combine all-to-alls, modeled or measured",
         STEP_PARTS),
    _col("allreduce_s", F64, "s", "modeled deployment: the rank's TP all-reduces", STEP_PARTS),
    _col("extrapolated", pa.int8(), "", "modeled from kernel tables: the parts looked up "
         "outside their table's rows, one bit each in the order attention, dense, experts, "
         "dispatch, combine, allreduce (1, 2, 4, ...); 0: none", KERNEL_TABLES),
    _col("rank_s", F64, "s", "modeled: the rank's own step (its parts, overlapped as its "
         "micro-batches allow, or its roofline), before it waits for the slowest rank; 0 where "
         "steps are not modeled", DP_IMBALANCE),
    _col("slowest_rank_s", F64, "s", "modeled: the largest `rank_s` of the step's DP ranks, "
         "idle ones included: the rank the step waits for; 0 where steps are not modeled",
         DP_IMBALANCE),
    _col("mean_rank_s", F64, "s", "modeled: the mean `rank_s` over all the step's DP ranks, "
         "idle ones included (an idle rank's is its devices' share of the experts and the "
         "all-to-alls it waits in); 0 where steps are not modeled", DP_IMBALANCE),
    _col("dp_imbalance", F64, "ratio", "modeled: the step's `slowest_rank_s` over its "
         "`mean_rank_s` (1: balanced); NaN where steps are not modeled", DP_IMBALANCE),
    _col("idle_ranks", I32, "", "the step's DP ranks whose rows are left out (idle ones, "
         "see below): the step ran on its rows' ranks and these"),
    _col("idle_kv_blocks_free", I64, "blocks", "those ranks' free KV blocks, summed: the "
         "step's free blocks over all its ranks are its rows' `kv_blocks_free` and these"),
), "An idle DP rank (it scheduled nothing and holds no sequence, running or waiting) writes "
   "no row, unless it holds a time larger than the step's other rows do (a part or "
   "`rank_s`) or an `extrapolated` bit they lack; a step with no busy rank keeps its first "
   "rank's row. So every step has a row, and its rows hold each part's and `rank_s`'s "
   "largest value over all its ranks and every `extrapolated` bit. A left-out row would "
   "read `empty` true and 0 in every count (`num_seqs` ... `kv_blocks_evicted`, the FLOPs "
   "and bytes); its free KV blocks are in `idle_kv_blocks_free`, its `rank_s` in "
   "`mean_rank_s`; its retained blocks and its parts are not kept. A run over rank "
   "processes (DP ranks on a torch device, each recording its own steps) writes every "
   "rank's row. `preempted`, `rejected`, `finished` and `discarded_tokens` count the whole "
   "plan and repeat on every row of the step; the step's times and `slowest_rank_s` ... "
   "`idle_kv_blocks_free` too.")

BATCHES = Table("batches", "sequence scheduled in a step of an instance",
                "by step, then dp_rank, then the plan's row order, each instance's rows in "
                "its own step order", (
    *_INSTANCE,
    _col("step", I64, "", "the plan's step number"),
    _col("dp_rank", I32, "", "the rank that ran the row"),
    _col("seq_id", I64, "", "the sequence (the request's request_id)"),
    _col("kind", CODES, "", "what the row computes: `chunk`, a prefill chunk that does not "
         "finish the prefill; `final`, the chunk that does, sampling the first token; "
         "`decode`, 1 + num_mtp positions", values=("chunk", "final", "decode")),
    _col("seqlen_q", I32, "tokens", "real tokens computed"),
    _col("seqlen_k", I32, "tokens", "keys visible: cached + in flight + seqlen_q"),
))

# The requests table's P/D columns: where a request went between the pools, each with its
# value where that never happened (co-located rows name their one instance for both pools)
PD_COLUMNS = (
    _col("prefill_instance", I32, "", "P/D: the prefill instance that prefilled it; "
         "co-located: 0; -1 if never enqueued", DISAGGREGATION, missing=-1),
    _col("decode_instance", I32, "", "P/D: the decode instance it was handed to; "
         "co-located: 0; -1 if never handed to one", DISAGGREGATION, missing=-1),
    _col("decode_dp_rank", I32, "", "the DP rank that decoded it (co-located: dp_rank); -1 "
         "if none", DISAGGREGATION, missing=-1),
    _col("kv_bytes", F64, "bytes", "P/D: the KV moved to the decode instance (every prompt "
         "token's, all layers); NaN co-located or never handed off", DISAGGREGATION, missing=NAN),
    _col("handoff_s", F64, "s", "P/D: when the prefill instance sampled its first token and "
         "handed it off; NaN if never", DISAGGREGATION, missing=NAN),
    _col("transfer_start_s", F64, "s", "P/D: when the decode instance reserved its blocks "
         "and the transfer began; NaN if never", DISAGGREGATION, missing=NAN),
    _col("transfer_end_s", F64, "s", "P/D: when its KV (and first token) reached the decode "
         "instance; NaN if never", DISAGGREGATION, missing=NAN),
    _col("decode_wait_s", F64, "s", "P/D: from the prefill's request for decode room to the "
         "transfer's start (the decode instance's step in flight, then backpressure)",
         DISAGGREGATION, missing=NAN),
)

REQUESTS = Table("requests", "trace request, enqueued or not",
                 "not promised; request_id is the trace's row, sort by it", (
    _col("request_id", I64, "", "the request's row in the trace, from 0"),
    _col("arrival_s", F64, "s", "intended enqueue time, from the trace", INPUTS),
    _col("enqueue_s", F64, "s", "actual enqueue time; NaN if never enqueued", INPUTS),
    _col("first_scheduled_s", F64, "s", "start of the first step that scheduled any of its "
         "tokens; NaN if never, or unknown (a run against an endpoint)", INPUTS, missing=NAN),
    _col("first_token_s", F64, "s", "commit time of its first output token (P/D: when it "
         "reached the decode instance with the KV); NaN if none",
         INPUTS),
    _col("last_token_s", F64, "s", "commit time of its last output token; NaN if none",
         INPUTS),
    _col("decode_stall_s", F64, "s", "time between its first and last token in steps that "
         "did not advance it while it decoded: the prompt rounds it sat out (with mixed "
         "batches, steps it waited for budget); P/D: the decode instance's; NaN against an "
         "endpoint", DECODE_STALL, missing=NAN),
    _col("prompt_len", I64, "tokens", "prompt tokens, from the trace"),
    _col("max_new_tokens", I64, "tokens", "output tokens the trace asks for"),
    _col("session_id", I64, "", "a session trace's session; -1 for a request trace",
         SESSIONS, missing=-1),
    _col("turn", I64, "", "the turn's number in its session; -1 for a request trace",
         SESSIONS, missing=-1),
    _col("output_tokens", I64, "tokens", "output tokens committed (each one has a token time)",
         INPUTS),
    _col("dp_rank", I32, "", "the rank that served it (P/D: prefilled it); -1 if never "
         "enqueued, or unknown (a run against an endpoint)", missing=-1),
    _col("preemptions", I32, "", "times it was preempted; -1 unknown (against an endpoint)",
         missing=-1),
    _col("recomputed_tokens", I64, "tokens", "tokens computed again after preemptions; -1 "
         "unknown (against an endpoint)", missing=-1),
    _col("prefix_hit_tokens", I64, "tokens", "prompt tokens found in the prefix cache, "
         "not computed; -1 unknown (against an endpoint)", missing=-1),
    Column("status", TEXT, "", "how it left, written by name (`handed_off`: a prompt "
           "engine's request, done with its first token; the codes are the C++ step log's)",
           INPUTS, ((0, "finished"), (3, "handed_off"), (1, "rejected"), (2, "unfinished"))),
    _col("reason", TEXT, "", "why it was rejected, never enqueued or (P/D) left "
         "unfinished between the pools; empty otherwise"),
    *PD_COLUMNS,
    _col("ttft_s", F64, "s", "time to first token", PER_REQUEST),
    _col("tpot_s", F64, "s", "time per output token after the first", PER_REQUEST),
    _col("e2e_s", F64, "s", "end-to-end latency", PER_REQUEST),
    _col("queueing_delay_s", F64, "s", "arrival to first scheduled", PER_REQUEST),
    _col("schedule_fidelity_s", F64, "s", "how late it was enqueued", PER_REQUEST),
    _col("enqueue_drift_s", F64, "s", "how late the frontend thread enqueued it; NaN without "
         "one", FRONTEND),
    _col("delivery_delay_p50_s", F64, "s", "median of its tokens' delivery delays; NaN "
         "without a frontend thread or tokens", FRONTEND),
    _col("delivery_delay_max_s", F64, "s", "the largest of its tokens' delivery delays",
         FRONTEND),
))

_DEVICE_VALUES = (
    ("util_pct", "%", "time a kernel was running (NVML) or NPU utilisation"),
    ("util_window_s", "s", "time the averaged driver samples of util_pct cover"),
    ("sm_activity_pct", "%", "SMs busy (NVML GPM)"),
    ("tensor_activity_pct", "%", "any tensor pipe busy (NVML GPM)"),
    ("aicore_pct", "%", "AI Core usage (npu-smi)"),
    ("mem_busy_pct", "%", "time device memory was read or written"),
    ("mem_bw_util_pct", "%", "device memory bandwidth used, of peak"),
    ("mem_used_bytes", "bytes", "device memory in use"),
    ("mem_total_bytes", "bytes", "device memory capacity"),
    ("power_w", "W", "board power"),
    ("energy_j", "J", "energy since the sampler started"),
    ("sm_clock_mhz", "MHz", "SM clock"),
    ("mem_clock_mhz", "MHz", "memory clock"),
    ("process_cpu_pct", "% of one core", "the harness process's CPU, all threads"),
    ("host_cpu_pct", "%", "the host's CPU, all cores"),
    ("process_rss_bytes", "bytes", "the harness process's resident memory"),
    ("host_mem_used_bytes", "bytes", "the host's memory in use"),
)

TOKENS_DOC = "workloads.md#tokens-and-sampling"
TOKENS = Table("tokens", "output token of a request (written with workload key `tokens: true`)",
               "by request_id, then position", (
    _col("request_id", I64, "", "the trace request (the requests table's `request_id`)"),
    _col("position", I64, "", "the output token's index, from 0 (the first token after the "
         "prompt)"),
    _col("token_id", I64, "", "the token the engine sampled there", TOKENS_DOC),
), "Written on a torch device only (a modeled one samples no tokens). A request has at most "
   "its `max_new_tokens` rows; one stopped early has the tokens it committed.")

SESSIONS_TABLE = Table("sessions", "session of a session trace (written for one only: "
                       "docs/workloads.md, \"Sessions\")", "by session start, then session_id", (
    _col("session_id", I64, "", "the session (the requests table's `session_id`)", SESSIONS),
    _col("turns", I64, "", "its turns, sub-agents' included"),
    _col("subagent_turns", I64, "", "of them, sub-agents' (a sub-agent's first turn and its "
         "chain)"),
    _col("finished_turns", I64, "", "turns that finished (a rejected or unfinished one ends "
         "its turn early; one never enqueued did not arrive)"),
    _col("start_s", F64, "s", "its root's arrival"),
    _col("end_s", F64, "s", "the last token of its last turn; NaN if no turn has one"),
    _col("makespan_s", F64, "s", "end_s - start_s"),
    _col("gap_s", F64, "s", "the trace's think and tool time of its turns, summed: time its "
         "turns waited on no engine (sub-agents' gaps overlap)"),
    _col("prompt_tokens", I64, "tokens", "its turns' prompts as replayed, summed (each the "
         "context so far, or the trace's recorded prompt)"),
    _col("prefix_hit_tokens", I64, "tokens", "of them, found in the prefix cache; -1 "
         "unknown (against an endpoint)"),
    _col("output_tokens", I64, "tokens", "its turns' output tokens committed"),
))

DEVICE = Table("device", "sample of one source on one device (the host is device -1)",
               "as sampled: about t_s across sources and devices (sort by t_s)", (
    _col("t_s", F64, "s", "time of the reading, from the replay's start on the wall clock",
         DEVICE_COLUMNS),
    _col("source", TEXT, "", "`nvml`, `npu-smi` or `cpu`", DEVICE_COLUMNS),
    _col("device", I64, "", "the engine's device index; -1 for the host", DEVICE_COLUMNS),
) + tuple(_col(name, F64, unit, meaning, DEVICE_COLUMNS) for name, unit, meaning in _DEVICE_VALUES),
    "Every column after `device` is null wherever its source cannot tell, never estimated.")

SERVER_METRICS = "serving.md#the-servers-metrics"
SERVER = Table("server", "sample of the endpoint's /metrics in a scrape (a run against an "
               "endpoint: `target:`)", "by t_s, then in the server's order", (
    _col("t_s", F64, "s", "when the scrape's response was read, from the replay's start on "
         "the wall clock", SERVER_METRICS),
    _col("metric", TEXT, "", "steptrace's name of a figure servers name differently "
         "(`running`, `waiting`, `kv_cache_usage`, `generation_tokens`), else `name`",
         SERVER_METRICS),
    _col("name", TEXT, "", "the sample's name at the server, e.g. `vllm:num_requests_running` "
         "(a histogram's `_bucket`, `_sum` and `_count` included)"),
    _col("labels", TEXT, "", "its labels, `k=\"v\"` joined by commas, sorted by name; empty "
         "where it has none"),
    _col("value", F64, "", "its value"),
), "Empty, with the manifest's `target.metrics` saying why, where the endpoint has no "
   "/metrics or its text is not Prometheus' format, or `target.metrics_interval_s` is null.")

SUMMARY = Table("summary", "statistic of one metric over the measured window",
                "latency and throughput, then the engine's step times and MFU, the harness "
                "calibration, then the device", (
    _col("metric", TEXT, "", "what is summarised, e.g. `ttft`", "metrics.md#summary-table"),
    _col("stat", TEXT, "", "which statistic, e.g. `p99`", "metrics.md#summary-table"),
    _col("value", F64, "", "its value, in `unit`"),
    _col("unit", TEXT, "", "the value's unit, e.g. `s`"),
))

GIL = Table("gil", "run of a GIL A/B sweep (written under <output>/<name>/sweeps/)",
            "in the order the runs ran", (
    _col("run_id", TEXT, "", "the run's folder under <output>/<name>/"),
    _col("arm", TEXT, "", "`released`, `held`, `released_aa` (the A/A arm: released again) or "
         "`postprocess_released`", GIL_DOC),
    _col("block", I64, "", "the block (repeat) the run belongs to", GIL_DOC),
    _col("order", I64, "", "its place in the block's shuffled order, from 0", GIL_DOC),
    _col("switch_interval_s", F64, "s", "sys.setswitchinterval during the run", GIL_DOC),
    _col("other_cpu_pct", F64, "%", "other processes' CPU during the run, of the host's",
         GIL_DOC),
    _col("steal_pct", F64, "%", "steal time during the run, of the host's CPU", GIL_DOC),
    _col("contaminated", BOOL, "", "other_cpu_pct + steal_pct above "
         "`gil_contamination_pct`", GIL_DOC),
    _col("sched_call_p50_us", F64, "us", "the run's summary `sched_call p50`"),
    _col("sched_call_p99_us", F64, "us", "the run's summary `sched_call p99`"),
    _col("steps_per_s", F64, "1/s", "the run's summary `step_rate per_s`"),
    _col("enqueue_drift_p99_s", F64, "s", "the run's summary `enqueue_drift p99` (NaN "
         "without a frontend thread)"),
    _col("delivery_delay_p99_s", F64, "s", "the run's summary `delivery_delay p99`"),
    _col("frontend_cpu_share_pct", F64, "% of one core", "the run's summary "
         "`frontend cpu_share`"),
))

CAPACITY = Table("capacity", "probe of a capacity search (written in the search's folder, "
                 "<output>/<name>/capacity/<date-time>-<profile>/, beside the probes' run folders)",
                 "in the order the probes ran", (
    _col("probe", I64, "", "the probe's number, from 0, in the order they ran", CAPACITY_DOC),
    _col("run_id", TEXT, "", "the probe's run folder, in the search's folder"),
    _col("concurrency", I64, "requests", "a concurrency search's knob: the probe's "
         "`load.concurrency`, requests in flight; null in a rate search",
         "capacity.md#concurrency"),
    _col("rate", F64, "req/s", "the offered arrival rate: `trace.generate.rate`, or a trace "
         "file's mean arrival rate at the probe's `trace.time_scale`; in a concurrency search "
         "the achieved rate, an outcome: the run's summary `throughput requests`", CAPACITY_DOC),
    _col("requests", I64, "requests", "the requests in the probe's trace: the workload's, "
         "twice as many in the length check", "capacity.md#trace-length"),
    _col("met", BOOL, "", "the probe's SLO attainment is at or above the search's target",
         CAPACITY_DOC),
    _col("at_capacity", BOOL, "", "the probe the answer is read from: the highest rate (or "
         "concurrency) found meeting the target (the low end of the final bracket)",
         CAPACITY_DOC),
    _col("length_check", BOOL, "", "the probe re-checks the answer, less its resolution, on "
         "a trace twice as long, outside the bracket; `met` false: the answer depends on the "
         "trace's length", "capacity.md#trace-length"),
    _col("attainment", F64, "fraction", "the run's summary `goodput attainment`",
         "metrics.md#run-level"),
    _col("goodput", F64, "req/s", "the run's summary `goodput requests`", "metrics.md#run-level"),
    _col("output_tokens_per_device", F64, "tok/s", "the run's summary `throughput "
         "output_tokens` over the deployment's devices"),
    _col("ttft_p99_s", F64, "s", "the run's summary `ttft p99`"),
    _col("tpot_p50_s", F64, "s", "the run's summary `tpot p50`"),
    _col("tpot_p99_s", F64, "s", "the run's summary `tpot p99`"),
))

SWEEPS_DOC = "sweeps.md#the-table"
POWER_DOC = "metrics.md#power-and-cost"
SWEEP_COST_DOC = "sweeps.md#cost-and-energy"
PD_RATIO_DOC = "sweeps.md#the-pd-ratio-search"
SWEEP_STATUSES = ("done", "failed", "refused")  # the sweep table's status, a text column
SWEEP = Table("sweep", "point of a `steptrace sweep` (written in the sweep's folder, "
              "<output>/<sweep name>/, beside its `points/` folder)",
              "in the grid's order (the first axis varying slowest)", (
    _col("point", TEXT, "", "the point's key: 12 hex digits of the sha256 of its resolved "
         "workload and the mode; its folder's name; empty for a refused point", SWEEPS_DOC),
    _col("axes", TEXT, "", "the point's axis values, a JSON object: axis key -> value"),
    _col("device", TEXT, "", "the resolved workload's `device`"),
    _col("front", TEXT, "", "the resolved value of the `--front-by` key (default `device`): "
         "the group whose Pareto front the point is judged in", SWEEPS_DOC),
    _col("status", TEXT, "", "`done`, `failed` (the point's run failed: `reason`) or "
         "`refused` (not a valid point: `reason`; nothing ran)", SWEEPS_DOC),
    _col("reason", TEXT, "", "why the point failed or was refused; empty when done"),
    _col("skipped", BOOL, "", "done by an earlier invocation of the sweep and not run again "
         "(resume)", SWEEPS_DOC),
    _col("folder", TEXT, "", "the point's folder, relative to the sweep's: points/<point>"),
    _col("run_dir", TEXT, "", "the run the answer is read from: the point's run, or in "
         "capacity mode the run at capacity (the search's folder when none met)"),
    _col("outcome", TEXT, "", "`run` in run mode; in capacity mode the search's outcome: "
         "`capacity`, `at_least`, `none`, `probe_limit` or `trace_too_short`",
         "capacity.md#the-search"),
    _col("rate", F64, "req/s", "capacity mode: the capacity (the highest rate meeting the "
         "target); run mode: the run's summary `throughput requests`"),
    _col("concurrency", I64, "requests", "capacity mode, load.mode concurrency: the most "
         "requests in flight meeting the target; else null", "capacity.md#concurrency"),
    _col("output_tokens_per_device", F64, "tok/s", "`output_tokens_per_s` over the "
         "deployment's devices"),
    _col("tokens_per_s_per_user", F64, "tok/s", "1 / `tpot_p50_s`: one request's decode "
         "speed", SWEEPS_DOC),
    _col("output_tokens_per_s", F64, "tok/s", "the run's summary `throughput output_tokens`"),
    _col("attainment", F64, "fraction", "the run's summary `goodput attainment` (NaN "
         "without an SLO)", "metrics.md#run-level"),
    _col("goodput", F64, "req/s", "the run's summary `goodput requests`",
         "metrics.md#run-level"),
    _col("ttft_p50_s", F64, "s", "the run's summary `ttft p50`"),
    _col("ttft_p99_s", F64, "s", "the run's summary `ttft p99`"),
    _col("tpot_p50_s", F64, "s", "the run's summary `tpot p50`"),
    _col("tpot_p99_s", F64, "s", "the run's summary `tpot p99`"),
    _col("power_w", F64, "W", "power per device over the run's measured window: measured "
         "(NVML energy) where the run recorded it, else modeled from the device profile "
         "(`idle_w`, `tdp_w`) and `busy`; NaN where neither is known", POWER_DOC),
    _col("power_source", TEXT, "", "`measured`, `modeled`, or empty where `power_w` is "
         "unknown", POWER_DOC),
    _col("busy", F64, "fraction", "modeled power: the share of the measured window the "
         "devices spent in steps (NaN for measured power)", POWER_DOC),
    _col("output_tokens_per_kw", F64, "tok/s per kW", "`output_tokens_per_device` over "
         "`power_w` in kW", POWER_DOC),
    _col("price_per_hour", F64, "$/h", "the sweep file's `prices` for the point's device: "
         "dollars per device-hour; NaN without one", SWEEP_COST_DOC),
    _col("output_tokens_per_dollar_hour", F64, "tok/s per $/h", "`output_tokens_per_device` "
         "over `price_per_hour` (x 3600: output tokens per dollar)", POWER_DOC),
    _col("pd_prefill_rate", F64, "req/s", "`search.method pd_ratio`: the capacity of one "
         "prefill instance alone (one output token a request, the TTFT limit alone); else "
         "NaN", PD_RATIO_DOC),
    _col("pd_decode_rate", F64, "req/s", "`search.method pd_ratio`: the capacity of one "
         "decode instance alone (prefill instances to spare, the whole SLO); else NaN",
         PD_RATIO_DOC),
    _col("pd_balanced_ratio", F64, "", "`pd_decode_rate` / `pd_prefill_rate`: the prefill "
         "instances per decode instance at which the pools' capacities match", PD_RATIO_DOC),
    _col("pd_estimated_rate", F64, "req/s", "the point's capacity as the balance estimates "
         "it, min(x `pd_prefill_rate`, y `pd_decode_rate`) for its x prefill and y decode "
         "instances", PD_RATIO_DOC),
    _col("pareto", BOOL, "", "on its `front` group's Pareto front of output tokens/s per "
         "device and tokens/s per user", "sweeps.md#the-pareto-front"),
), notes="The answer's columns are null or NaN for a refused or failed point.")

TABLES = {t.name: t for t in (STEPS, BATCHES, REQUESTS, TOKENS, SESSIONS_TABLE, DEVICE, SERVER,
                              SUMMARY, GIL, CAPACITY, SWEEP, *FRONTIER_TABLES)}
# one per sweep or search, beside its run folders
SWEEP_TABLES = ("gil", "capacity", "sweep", *(t.name for t in FRONTIER_TABLES))
