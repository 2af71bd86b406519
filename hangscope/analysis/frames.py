"""Where a frame's code lives by its full path; ``analysis.stacks`` builds on this for the short
paths py-spy's text format prints."""

from __future__ import annotations

from hangscope.model import Frame

_LIBRARY_MARKERS = ("/site-packages/", "/dist-packages/", "/lib/python3", "<frozen ", "<string>")


def is_library_frame(frame: Frame) -> bool:
    """Frames from installed packages or the standard library, not the job's own code."""
    return frame.native or any(marker in frame.filename for marker in _LIBRARY_MARKERS)
