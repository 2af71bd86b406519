"""One module per failure kind. Each exposes ``detect(ctx) -> list[Finding]``."""

from __future__ import annotations

from hangscope.analysis.context import Detector
from hangscope.analysis.detectors import (
    arg_skew,
    busy_rank,
    call_sites,
    collective_mismatch,
    dataloader_stall,
    deadlock_cycle,
    init_hang,
    log_waits,
    lone_waits,
    mismatch_error,
    missing_rank,
    network_fault,
    os_wait,
    python_deadlock,
    quiet_death,
    rank_died,
    rank_oom,
    size_mismatch,
    stall_reports,
    straggler,
    straggler_logs,
    symmetric,
)

ALL: tuple[Detector, ...] = (
    deadlock_cycle.detect,
    call_sites.detect,
    collective_mismatch.detect,
    size_mismatch.detect,
    mismatch_error.detect,
    missing_rank.detect,
    symmetric.detect,
    log_waits.detect,
    stall_reports.detect,
    arg_skew.detect,
    rank_died.detect,
    quiet_death.detect,
    rank_oom.detect,
    network_fault.detect,
    dataloader_stall.detect,
    os_wait.detect,
    python_deadlock.detect,
    init_hang.detect,
    lone_waits.detect,
    straggler.detect,
    busy_rank.detect,
    straggler_logs.detect,
)
