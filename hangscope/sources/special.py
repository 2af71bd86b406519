"""What a path is when it is not a regular file: such a file is named in one gap line, never opened.

Reading a FIFO blocks until someone writes (TORCH_NCCL_DEBUG_INFO_PIPE_FILE makes one per rank
beside the dumps), a socket cannot be read as a file, and a device like /dev/zero never ends.
"""

from __future__ import annotations

import os
import re
import stat

_FR_PIPE = re.compile(r"(\d+)\.pipe$")


def not_a_file(path: str) -> str | None:
    """One line saying what ``path`` is when it is not a regular file (a FIFO, a socket, a
    device), else None. Such a file is never opened: reading a FIFO blocks until someone writes,
    a device like /dev/zero never ends."""
    try:
        mode = os.stat(path).st_mode  # follows a symlink; stat never blocks
    except OSError as exc:
        return f"{path}: cannot read ({exc.strerror or exc})"
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISFIFO(mode):
        m = _FR_PIPE.search(path)
        if m:
            return (f"{path}: a named pipe, not read: it looks like the flight-recorder trigger "
                    f"of TORCH_NCCL_DEBUG_INFO_PIPE_FILE; writing to it makes the live rank "
                    f"{m.group(1)} dump its flight recorder (`hangscope attach` does that)")
        return f"{path}: a named pipe (FIFO), not read: reading it would wait for a writer"
    what = ("a socket" if stat.S_ISSOCK(mode) else "a character device" if stat.S_ISCHR(mode)
            else "a block device" if stat.S_ISBLK(mode) else "not a regular file")
    return f"{path}: {what}, not read"
