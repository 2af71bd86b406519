"""Options of a live collection, kept apart from the collectors so importing them is cheap."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class AttachOptions:
    pid_group: int | None = None
    pids: tuple[int, ...] = ()
    match: str | None = None
    samples: int = 3
    interval: float = 1.0
    dump_timeout: float = 5.0
    native: bool = False
    nonblocking: bool = False
    trigger_fr: bool = True
