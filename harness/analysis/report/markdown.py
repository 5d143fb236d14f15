"""Text from run folders as Markdown that GitHub renders as that text (summary.md goes into
CI job summaries and pull-request comments, where GitHub renders HTML inside Markdown).

Every value is escaped unless the report's code wrote it as Markdown (a `Markdown` string),
as autoescaping does for HTML: `<`, `>` and `&` become entities, so no tag and no entity
becomes live; the characters of links and images (`[`, `]`), code spans, emphasis,
strikethrough, math and headings are backslash-escaped, and so is `|`, so that a value
cannot end its table cell; line breaks and other control characters become spaces, so a
value never begins a line of its own (a table row, an HTML block, a link definition). A
scheme's `://` and a leading `www.` get a backslash too: GitHub turns a bare URL into a
link. What GitHub links in any text it renders is left: an e-mail address, an @mention, a
#reference.
"""

from __future__ import annotations

import re

_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
_CONTROL = re.compile(r"[\x00-\x1f\x7f\u2028\u2029]")
# `_` between two letters or digits is left: it cannot emphasise (metric_names stay legible)
_SPECIAL = re.compile(r"[\\`*~\[\]|$#]|(?<![^\W_])_|_(?![^\W_])|(?<=\w):(?=//)"
                      r"|(?i:(?<=www)(?<![^\W_]www)\.)")


class Markdown(str):
    """Markdown the report's code wrote: it goes into summary.md as it is."""


def escape(value) -> Markdown:
    """`value` as Markdown that renders as its text."""
    if isinstance(value, Markdown):
        return value
    text = _CONTROL.sub(" ", str(value))
    text = "".join(_ENTITIES.get(c, c) for c in text)
    return Markdown(_SPECIAL.sub(lambda m: "\\" + m.group(0), text))


def code(value) -> Markdown:
    """`value` as a code span: a fence of more backticks than any run inside it."""
    text = _CONTROL.sub(" ", str(value))
    fence = "`" * (max((len(r) for r in re.findall("`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return Markdown(f"{fence}{pad}{text}{pad}{fence}")
