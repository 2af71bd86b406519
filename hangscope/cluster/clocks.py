"""Clock offsets of the nodes a fan-out collected from, measured from the fan-out itself.

A node's collection ran inside its client's lifetime: after this host started the client
(``sent_at``, this host's clock) and before it saw the client end (``back_at``). The bundle's
manifest says, by the node's own clock, when its collection started and ended. So the node's
clock minus this host's lies between ``wall_end - back_at`` and ``wall_start - sent_at``: an
interval as wide as the client's overhead (process start, srun or ssh set-up, the tar stream),
typically a second or two, which is what it can tell and no more. It is written into the
manifest as ``clock_offset_s`` (``low``, ``high``, ``reference``: this host), where
``sources/merge.py`` reads it: a node whose clock is off by more than the merge's slack is said,
with the interval, and collection windows are compared on corrected clocks.
"""

from __future__ import annotations

import socket
from typing import Any

from hangscope.bundle import read_manifest, write_manifest
from hangscope.cluster.runner import FanoutResult
from hangscope.errors import BadInputError
from hangscope.sources.merge import clock_window


def record_clock_offsets(result: FanoutResult) -> None:
    """Write each collected node's measured offset into its bundle's manifest. A bundle whose
    manifest lacks its clock (an older hangscope) or is unreadable is left as it is: the merge
    reports an unreadable one."""
    reference = socket.gethostname()
    for node in result.nodes:
        if node.status != "ok" or node.sent_at is None or node.back_at is None:
            continue
        try:
            manifest = read_manifest(node.bundle)
        except BadInputError:
            continue
        bounds = offset_bounds(manifest.get("clock"), node.sent_at, node.back_at)
        if bounds is None:
            continue
        manifest["clock_offset_s"] = {"low": round(bounds[0], 3), "high": round(bounds[1], 3),
                                      "reference": reference}
        write_manifest(node.bundle, manifest)


def offset_bounds(clock: Any, sent_at: float, back_at: float) -> tuple[float, float] | None:
    """(low, high) of the node's clock minus ours, or None when the manifest gives no window or
    a window that cannot have happened inside the client's lifetime on any single offset."""
    window = clock_window(clock)
    if window is None:
        return None
    low, high = window[1] - back_at, window[0] - sent_at
    if low > high:  # the node's collection took longer than its client lived: not our clock's
        return None
    return low, high
