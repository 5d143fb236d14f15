"""The report's two documents from one context: index.html (CSS and figures inline, no
request leaves the page) and summary.md (the same tables, for a CI summary or a comment)."""

from __future__ import annotations

import base64

import jinja2

ENV = jinja2.Environment(loader=jinja2.PackageLoader("harness.analysis.report", "templates"),
                         autoescape=jinja2.select_autoescape(["html"]), trim_blocks=True,
                         lstrip_blocks=True, undefined=jinja2.StrictUndefined)
ENV.filters["b64"] = lambda data: base64.b64encode(data).decode("ascii")


def html(context: dict) -> str:
    return ENV.get_template("report.html.j2").render(**context).strip() + "\n"


def markdown(context: dict) -> str:
    return ENV.get_template("summary.md.j2").render(**context).strip() + "\n"
