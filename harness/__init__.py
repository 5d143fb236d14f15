"""The harness: workloads, traces, replay, recorders, tables and the steptrace CLI."""
