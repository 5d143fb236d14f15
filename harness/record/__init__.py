"""Recording a run: one C++ call per step (recorder.py), the table writer's process
(table_writer.py, table_sink.py), the summaries fed a chunk at a time (metrics.py,
step_summary.py), and the run folder: made, its manifest written (run_folder.py), read back
as a Run (run.py), its tables through one reader (table_reader.py)."""
