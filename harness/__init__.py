"""The harness around the engine, by concern, imports flowing one way
(docs/architecture.md, "harness/"; tests/test_import_rules.py holds it): errors.py, io/,
schema/ (the tables), traces/ and workload/ (input), record/, telemetry/, replay/ (the loops
in this process), ranks/ (engine processes), run/ (one run end to end), analysis/ (result
folders into answers), sweeps/ (many runs) and commands/ (the steptrace CLI)."""
