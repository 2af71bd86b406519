"""One module per failure kind. Each exposes ``detect(ctx) -> list[Finding]``."""

from __future__ import annotations

from hangscope.analysis.context import Detector
from hangscope.analysis.detectors import (
    collective_mismatch,
    deadlock_cycle,
    missing_rank,
    rank_died,
    size_mismatch,
)

ALL: tuple[Detector, ...] = (
    deadlock_cycle.detect,
    collective_mismatch.detect,
    size_mismatch.detect,
    missing_rank.detect,
    rank_died.detect,
)
