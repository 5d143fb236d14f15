"""The code values the tables and summaries carry, declared once (docs/tables.md,
docs/metrics.md): a step's phase, a batch row's kind and a request's status (the coded
columns' declarations, harness/schema/tables.py), the SLO's metrics, the frontend's requests
columns."""

from .tables import BATCHES, REQUESTS, STEPS

PHASES = STEPS.column("phase").names_by_code()  # indexed by the step's prompt flag
KIND_NAMES = BATCHES.column("kind").names_by_code()  # indexed by engine.plan's KIND_*
STATUSES = REQUESTS.column("status").value_names
COMPLETED = ("finished", "handed_off")  # the engine did all it was asked: latency counts
# why a P/D request handed off is unfinished when the run ends: no decode instance had room
# for it yet, or its KV cache was on the way (the step log writes them too:
# csrc/recorder/step_log.cpp; docs/disaggregation.md)
AWAITING_DECODE_ROOM, IN_KV_TRANSFER = STRANDED_REASONS = (
    "awaiting decode room", "in KV transfer")
SLO_METRICS = ("ttft", "tpot", "e2e")
# a GIL sweep's arms (the gil_mode label), in the order a sweep names and compares them:
# each against the released arm (harness/workload/arms.py, docs/gil.md)
GIL_ARMS = ("released", "held", "released_aa", "postprocess_released")
# a capacity search's default target: DistServe's, the highest rate that keeps 90 % of
# requests within the SLO (harness/sweeps/capacity.py)
DEFAULT_ATTAINMENT = 0.9
# the requests table's columns a frontend thread fills (NaN without one)
FRONTEND_COLUMNS = ("enqueue_drift_s", "delivery_delay_p50_s", "delivery_delay_max_s")
