"""The harness around the engine, by concern, imports flowing one way
(docs/architecture.md, "harness/"; tests/test_import_rules.py holds it): errors.py, io/,
workload/ and traces/ (input), replay/, record/, sweeps/, telemetry/, schema/ (the tables),
analysis/ (result folders into answers) and commands/ (the steptrace CLI)."""
