"""`python -m harness.schema > docs/tables.md`."""

from .doc import markdown

print(markdown(), end="")
