"""steptrace report: run folders to a self-contained HTML page, a Markdown summary, PNG
figures and, on request, Chrome trace-event JSON (docs/report.md)."""

from .build import build

__all__ = ["build"]
