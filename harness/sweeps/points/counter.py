"""A search's progress over its stages: each stage's points counted as one sweep's."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, Optional

from .execute import Progress


@dataclass
class Counter:
    """The stages' counts as one sweep's: ended points add up; the total grows when a
    decode pool is measured again."""

    total: int
    progress: Optional[Callable[[Dict[str, int]], None]]
    ended: Dict[str, int] = field(default_factory=lambda: dict(done=0, skipped=0, failed=0))

    def stage(self) -> Optional[Progress]:
        if self.progress is None:
            return None
        start = dict(self.ended)

        def update(counts: Dict[str, int]) -> None:
            for k in start:
                self.ended[k] = start[k] + counts[k]
            n = sum(self.ended.values())
            self.total = max(self.total, n + counts["left"])
            assert self.progress is not None
            self.progress(dict(self.ended, left=self.total - n, total=self.total))
        return update

    def finish(self) -> None:
        """The counts at the end: the total is the points that ran (fewer than planned
        where a point's pools could not be measured)."""
        if self.progress is not None:
            n = sum(self.ended.values())
            self.progress(dict(self.ended, left=0, total=n))
