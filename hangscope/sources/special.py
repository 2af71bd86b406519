"""Files that are not files: FIFOs, sockets and devices found among the evidence.

Opening one can block for ever (a FIFO waits for a writer) or never end (``/dev/zero``), so
evidence discovery ``stat``s every path first and reads only regular files (and symlinks to them).
Anything else becomes one gap line saying what it is. The flight recorder's trigger pipe is the
common case: with ``TORCH_NCCL_DEBUG_INFO_PIPE_FILE`` set, each NCCL rank creates the FIFO
``<value><rank>.pipe`` beside its dumps, and writing to it asks the live job for a dump.
"""

from __future__ import annotations

import os
import stat

_KINDS = (
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISSOCK, "a UNIX socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISDIR, "a folder"),
)


def not_a_file(path: str) -> str | None:
    """None when ``path`` is a regular file (or a symlink to one) that can be read without
    blocking; otherwise one gap line naming it and saying why it was not read."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        return f"{path}: cannot read ({exc.strerror or exc})"
    if stat.S_ISREG(mode):
        return None
    what = next((name for test, name in _KINDS if test(mode)), "not a regular file")
    target = os.path.realpath(path)
    if target != os.path.abspath(path):
        what += f" (a link to {target})"
    if stat.S_ISFIFO(mode) and path.endswith(".pipe"):
        return (f"{path}: {what}, not read: the flight recorder's trigger pipe "
                "(TORCH_NCCL_DEBUG_INFO_PIPE_FILE); writing to it asks the live job for a "
                "flight-recorder dump (`hangscope attach` does that)")
    if stat.S_ISFIFO(mode):
        return f"{path}: {what}, not read (reading it would wait for a writer)"
    return f"{path}: {what}, not read (not an evidence file)"
