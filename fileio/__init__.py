"""The ground floor beneath engine/ and harness/: files as they are read and written.
Input files are regular files (regular.py) and YAML remembers the line of every key
(yaml_lines.py); outputs are written whole or not at all (atomic.py), into folders of
their own (own_folder.py), under names the system can hold (path_names.py); small JSON
files read as data they may not be (json_file.py) and written as JSON's own types
(json_text.py). It imports nothing of engine/ or harness/, nor torch or the C++ core."""
