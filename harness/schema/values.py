"""The code values the tables and summaries carry, declared once (docs/tables.md,
docs/metrics.md): a request's status, the SLO's metrics, the frontend's requests columns."""

STATUSES = ("finished", "handed_off", "rejected", "unfinished")
COMPLETED = ("finished", "handed_off")  # the engine did all it was asked: latency counts
SLO_METRICS = ("ttft", "tpot", "e2e")
# the requests table's columns a frontend thread fills (NaN without one)
FRONTEND_COLUMNS = ("enqueue_drift_s", "delivery_delay_p50_s", "delivery_delay_max_s")
