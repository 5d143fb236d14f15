"""What every part of the harness starts with: its own child processes, isolated
(child_process.py), SIGINT and SIGTERM turned into a flag a run checks between steps
(interrupt.py), and labels that name one thing as a word (one_word.py). Files as they are
read and written are the ground floor's, beneath engine/ too (fileio/)."""
