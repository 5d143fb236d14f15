"""The loops that drive engines through a trace, in this process, behind one interface
(loop.py's Loop): the step loop on the real or the virtual clock (driver.py), a P/D
deployment's instances in one discrete-event loop (disaggregated.py, with kv_links.py and
engine._core's routers), the C++ loops (native.py); the serving frontend's thread
(frontend.py) and a bare scheduler stepped as an engine (sched_replay.py). Engine
processes, one per device, are ranks/; one run end to end is run/."""
