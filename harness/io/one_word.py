"""Labels that name one thing as a word: a git commit or tag name, a CI runner's label. Such
a name holds no white space nor control character; one that did would break the tables
that print it (a newline ends `history show`'s row) and reach a terminal as escapes."""

from __future__ import annotations

import os
from typing import Optional, Tuple

from ..errors import BadInput

COMMIT_VARIABLES = ("STEPTRACE_COMMIT", "STEPTRACE_COMMIT_DATE")


def one_word(text: str, where: str) -> str:
    """`text` where it is a word; BadInput naming `where` (`--commit`, `$STEPTRACE_COMMIT`)
    for an empty text or one holding white space or a control character."""
    if not text:
        raise BadInput(f"{where}: empty: expected a name (a git commit, a tag, a runner's "
                       f"label)")
    if any(c.isspace() or not c.isprintable() for c in text):
        raise BadInput(f"{where}: {text!r:.80} holds a control character or white space: a "
                       f"git commit, a tag or a runner's label has none")
    return text


def commit_variables() -> Tuple[Optional[str], Optional[str]]:
    """The commit under test and its date as CI names them, COMMIT_VARIABLES (each None
    where unset or empty); BadInput naming $STEPTRACE_COMMIT where it is not one word."""
    commit, date = (os.environ.get(name) or None for name in COMMIT_VARIABLES)
    if commit:
        one_word(commit, f"${COMMIT_VARIABLES[0]}")
    return commit, date
