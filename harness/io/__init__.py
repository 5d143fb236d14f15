"""What every part of the harness writes and starts with: outputs written whole or not at
all (atomic.py), into folders of its own (own_folder.py), its own child processes, isolated
(child_process.py), and SIGINT and SIGTERM turned into a flag a run checks between steps
(interrupt.py), and JSON as the commands print it (json_text.py)."""
