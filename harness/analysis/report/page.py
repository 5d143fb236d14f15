"""The report's two documents from one context: index.html (CSS and figures inline, no
request leaves the page) and summary.md (the same tables, for a CI summary or a comment).

Both escape every value they are given, so that a string from a run folder (a workload's
name, a device profile's, a folder's, a summary's metric or unit) is shown as text: the
page autoescapes HTML, the summary escapes Markdown (markdown.py). Only markup the
templates and the report's code write is left as it is; nothing is marked safe.
"""

from __future__ import annotations

import base64

import jinja2

from .markdown import code, escape

_LOADER = jinja2.PackageLoader("harness.analysis.report", "templates")
HTML = jinja2.Environment(loader=_LOADER, autoescape=True, trim_blocks=True,
                          lstrip_blocks=True, undefined=jinja2.StrictUndefined)
HTML.filters["b64"] = lambda data: base64.b64encode(data).decode("ascii")
MARKDOWN = jinja2.Environment(loader=_LOADER, autoescape=False, finalize=escape,
                              trim_blocks=True, lstrip_blocks=True,
                              undefined=jinja2.StrictUndefined)
MARKDOWN.filters["code"] = code


def html(context: dict) -> str:
    return HTML.get_template("report.html.j2").render(**context).strip() + "\n"


def markdown(context: dict) -> str:
    return MARKDOWN.get_template("summary.md.j2").render(**context).strip() + "\n"


def trend_html(context: dict) -> str:
    return HTML.get_template("trend.html.j2").render(**context).strip() + "\n"


def trend_markdown(context: dict) -> str:
    return MARKDOWN.get_template("trend.md.j2").render(**context).strip() + "\n"


def sweep_html(context: dict) -> str:
    return HTML.get_template("sweep.html.j2").render(**context).strip() + "\n"


def sweep_markdown(context: dict) -> str:
    return MARKDOWN.get_template("sweep.md.j2").render(**context).strip() + "\n"
