"""What every part of the harness writes and starts with: outputs written whole or not at
all (atomic.py), into folders of its own (own_folder.py), its own child processes, isolated
(child_process.py), and SIGINT and SIGTERM turned into a flag a run checks between steps
(interrupt.py), JSON as the commands print it (json_text.py), and a small JSON file read
as data it may not be (json_file.py)."""
