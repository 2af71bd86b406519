"""Named predicates over frames: which ones are the user's code, which are torch's plumbing."""

from __future__ import annotations

from collections.abc import Sequence

from hangscope.model import Frame

_LIBRARY_MARKERS = ("/site-packages/", "/dist-packages/", "/lib/python3", "<frozen ", "<string>")


def is_library_frame(frame: Frame) -> bool:
    """Frames from installed packages or the standard library, not the job's own code."""
    return frame.native or any(marker in frame.filename for marker in _LIBRARY_MARKERS)


def user_frame(frames: Sequence[Frame]) -> Frame | None:
    """The innermost frame of the job's own code (frames are innermost first)."""
    return next((f for f in frames if not is_library_frame(f)), None)
