"""steptrace report: run folders to a self-contained HTML page, a Markdown summary, PNG
figures and, on request, Chrome trace-event JSON (docs/report.md)."""

from .build import build, build_history

__all__ = ["build", "build_history"]
