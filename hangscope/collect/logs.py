"""Find and read each rank's logs with zero configuration.

Where a rank's output goes, in the order we look:

- its stdout/stderr, when ``/proc/PID/fd/1`` and ``/2`` are regular files (a tty, pipe or socket
  cannot be read back: a note says which it was). We read through ``/proc/PID/fd/N`` so a deleted
  file or one in another mount namespace still reads;
- torchrun's ``--log-dir`` (torch 2.13: ``DIR/<run_id>_<random>/attempt_<restart>/<local_rank>/``
  holding ``stdout.log``, ``stderr.log`` and, after a failure, ``error.json``), found from the
  launcher's command line or from the directory of ``TORCHELASTIC_ERROR_FILE``;
- ``NCCL_DEBUG_FILE`` with NCCL's ``%h`` (host) and ``%p`` (pid) filled in;
- ``TORCHELASTIC_ERROR_FILE`` (written by ``@record`` when a rank fails);
- the launcher's own stdout/stderr when they are files (``--tee`` copies rank output there too).

A log can be gigabytes: we keep the first ``HEAD_BYTES`` and the last ``TAIL_BYTES`` and put a
``SKIP_MARKER`` line where the middle was dropped (line numbers after it are not the file's).
Bundle kind ``log`` stores ``LogFile.data`` as it is.
"""

from __future__ import annotations

import glob
import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from hangscope.discover import JobProcesses, ProcInfo, RankProcess

HEAD_BYTES = 64 << 10
TAIL_BYTES = 4 << 20
SKIP_MARKER = b"[hangscope: skipped "  # full line: b"\n[hangscope: skipped N bytes]\n"

LogKind = Literal["stdout", "stderr", "nccl_debug", "error_file", "launcher", "shared"]
_LOG_DIR_ARG = re.compile(r"^--log[-_]dir(?:=(.*))?$")


@dataclass(slots=True)
class LogFile:
    """One log as read (bounded). ``rank`` is None for the launcher's output and for a file
    several ranks write (``shared``)."""

    rank: int | None
    kind: LogKind
    path: str
    data: bytes
    truncated: bool
    size: int = 0  # the file's size when read
    skipped_bytes: int = 0
    source: str = ""  # the path it was read through (/proc/PID/fd/1 for a rank's stdout)

    def bundle_name(self) -> str:
        """A stable file name for the bundle (``add_file`` wants a bare name)."""
        ext = ".json" if self.kind == "error_file" else ".log"
        return f"{self.kind}{ext}"


def read_bounded(path: str, head: int = HEAD_BYTES, tail: int = TAIL_BYTES
                 ) -> tuple[bytes, bool, int, int]:
    """(data, truncated, size, skipped): the whole file, or its head and tail at line bounds."""
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size <= head + tail:
            return handle.read(head + tail), False, size, 0
        first = handle.read(head)
        cut = first.rfind(b"\n")
        first = first[:cut + 1] if cut >= 0 else first
        handle.seek(size - tail)
        last = handle.read(tail)
        nl = last.find(b"\n")
        last = last[nl + 1:] if 0 <= nl < len(last) - 1 else last
    skipped = size - len(first) - len(last)
    marker = SKIP_MARKER + str(skipped).encode() + b" bytes]\n"
    if not first.endswith(b"\n"):
        marker = b"\n" + marker
    return first + marker + last, True, size, skipped


def fd_target(pid: int, fd: int) -> tuple[str, str]:
    """(what, link) for a process's fd: what is file|tty|pipe|socket|devnull|other|closed."""
    proc_path = f"/proc/{pid}/fd/{fd}"
    try:
        link = os.readlink(proc_path)
        mode = os.stat(proc_path).st_mode
    except FileNotFoundError:
        return "closed", ""
    except OSError as exc:
        return "unreadable", exc.strerror or str(exc)
    if stat.S_ISREG(mode):
        return "file", link
    if link.startswith("pipe:") or stat.S_ISFIFO(mode):
        return "pipe", link
    if link.startswith("socket:") or stat.S_ISSOCK(mode):
        return "socket", link
    if link == "/dev/null":
        return "devnull", link
    if stat.S_ISCHR(mode) and link.startswith(("/dev/pts/", "/dev/tty", "/dev/console")):
        return "tty", link
    return "other", link


class _Seen:
    """Files already taken, by (device, inode), so a shared file is read once per job."""

    def __init__(self) -> None:
        self.owner: dict[tuple[int, int], str] = {}  # who took it first, as notes name them
        self.owner_rank: dict[tuple[int, int], int | None] = {}  # that taker's rank, if one
        self.path_key: dict[str, tuple[int, int]] = {}  # each claimed path's file
        self.shared: set[tuple[int, int]] = set()  # files more than one rank writes

    def claim(self, path: str, who: str, rank: int | None = None) -> str | None:
        """None if new (now ours), else who took it first. ``rank``: the claimer's, if a rank."""
        try:
            st = os.stat(path)
        except OSError:
            return None
        key = (st.st_dev, st.st_ino)
        self.path_key[path] = key
        if key in self.owner:
            first_rank = self.owner_rank[key]
            if first_rank is not None and rank is not None and first_rank != rank:
                self.shared.add(key)
            return self.owner[key]
        self.owner[key] = who
        self.owner_rank[key] = rank
        return None


def collect_job_logs(job: JobProcesses) -> tuple[list[LogFile], list[str]]:
    """Every log of the job on this host, each file once; notes say what could not be had."""
    seen = _Seen()
    files: list[LogFile] = []
    notes: list[str] = []
    for launcher in job.launchers:
        got, said = find_launcher_logs(launcher, seen)
        files.extend(got)
        notes.extend(said)
    for rank in job.ranks:
        got, said = find_rank_logs(rank, job.launchers, host=job.host, seen=seen)
        files.extend(got)
        notes.extend(said)
    return _shared_as_job_files(files, seen), notes


def _shared_as_job_files(files: list[LogFile], seen: _Seen) -> list[LogFile]:
    """A file several ranks write (a launcher that sends every worker's output to one file) is
    the job's, not the first rank's: a line in it that names no rank is no more rank 0's than
    any other's (a crashed rank's unprefixed traceback would be read as rank 0's death)."""
    for item in files:
        if item.rank is not None and seen.path_key.get(item.source) in seen.shared:
            item.rank, item.kind = None, "shared"
    return files


def find_launcher_logs(launcher: ProcInfo, seen: _Seen | None = None
                       ) -> tuple[list[LogFile], list[str]]:
    """The launcher's stdout/stderr when they are files (with --tee they hold rank output too)."""
    seen = seen or _Seen()
    files: list[LogFile] = []
    notes: list[str] = []
    for fd in (1, 2):
        what, link = fd_target(launcher.pid, fd)
        if what != "file":
            notes.append(f"launcher {launcher.pid}: {_FD_NAMES[fd]} is {_describe(what, link)}: "
                         f"not collected")
            continue
        proc_path = f"/proc/{launcher.pid}/fd/{fd}"
        if seen.claim(proc_path, f"launcher {launcher.pid}") is not None:
            continue  # stderr into the same file as stdout
        _read_into(files, notes, None, "launcher", proc_path, link)
    return files, notes


_FD_NAMES = {1: "stdout", 2: "stderr"}


def find_rank_logs(rank: RankProcess, launchers: Sequence[ProcInfo] = (), *,
                   host: str | None = None, seen: _Seen | None = None
                   ) -> tuple[list[LogFile], list[str]]:
    """Every log of one rank we can find without being told where."""
    seen = seen or _Seen()
    files: list[LogFile] = []
    notes: list[str] = []
    who = f"rank {rank.rank}"
    for fd in (1, 2):
        kind: LogKind = "stdout" if fd == 1 else "stderr"
        what, link = fd_target(rank.pid, fd)
        if what != "file":
            notes.append(f"{who} (pid {rank.pid}): {kind} is {_describe(what, link)}: "
                         f"not collected")
            continue
        proc_path = f"/proc/{rank.pid}/fd/{fd}"
        first = seen.claim(proc_path, f"{who} {kind}", rank.rank)
        if first is not None:
            if first.startswith("launcher"):
                notes.append(f"{who}: {kind} goes to the {first}'s output file {link} "
                             f"(collected once, as the launcher log)")
            elif first != f"{who} stdout":
                notes.append(f"{who}: {kind} is the same file as {first} ({link})")
            continue
        _read_into(files, notes, rank.rank, kind, proc_path, link)
    for kind, path in _log_dir_files(rank, launchers):
        if os.path.isfile(path) and seen.claim(path, f"{who} {kind}", rank.rank) is None:
            _read_into(files, notes, rank.rank, kind, path, path)
    cwd = _cwd(rank.pid)
    nccl = rank.env.get("NCCL_DEBUG_FILE")
    if nccl:
        path = _resolve(nccl_debug_path(nccl, host or os.uname().nodename, rank.pid), cwd)
        if not os.path.isfile(path):
            notes.append(f"{who}: NCCL_DEBUG_FILE={nccl} -> {path} does not exist (yet)")
        elif seen.claim(path, f"{who} nccl_debug", rank.rank) is None:
            _read_into(files, notes, rank.rank, "nccl_debug", path, path)
    elif rank.env.get("NCCL_DEBUG"):
        notes.append(f"{who}: NCCL_DEBUG={rank.env['NCCL_DEBUG']} without NCCL_DEBUG_FILE: "
                     f"NCCL writes to the rank's stdout")
    err = rank.env.get("TORCHELASTIC_ERROR_FILE")
    if err:
        path = _resolve(err, cwd)
        if os.path.isfile(path) and seen.claim(path, f"{who} error_file", rank.rank) is None:
            _read_into(files, notes, rank.rank, "error_file", path, path)
    return files, notes


def nccl_debug_path(template: str, host: str, pid: int) -> str:
    """NCCL_DEBUG_FILE with NCCL's substitutions: %h host name, %p pid (%% is a literal %)."""
    return re.sub(r"%[hp%]", lambda m: {"%h": host, "%p": str(pid), "%%": "%"}[m.group(0)],
                  template)


def torchrun_log_dir(cmdline: Sequence[str]) -> str | None:
    """The value of torchrun's ``--log-dir``/``--log_dir`` option, if given."""
    for i, arg in enumerate(cmdline):
        m = _LOG_DIR_ARG.match(arg)
        if m:
            if m.group(1) is not None:
                return m.group(1) or None
            return cmdline[i + 1] if i + 1 < len(cmdline) else None
    return None


def _log_dir_files(rank: RankProcess, launchers: Sequence[ProcInfo]) -> list[tuple[LogKind, str]]:
    """torchrun's per-rank files: from the error file's folder, else from ``--log-dir``."""
    folders: list[str] = []
    err = rank.env.get("TORCHELASTIC_ERROR_FILE")
    if err:
        folders.append(os.path.dirname(_resolve(err, _cwd(rank.pid))))
    if rank.local_rank is not None:
        for launcher in launchers:
            base = torchrun_log_dir(launcher.cmdline)
            if base:
                folders.extend(_attempt_dirs(_resolve(base, _cwd(launcher.pid)), rank))
    out: list[tuple[LogKind, str]] = []
    for folder in dict.fromkeys(folders):
        out.append(("stdout", os.path.join(folder, "stdout.log")))
        out.append(("stderr", os.path.join(folder, "stderr.log")))
    return out


def _attempt_dirs(base: str, rank: RankProcess) -> list[str]:
    """``base/<run_id>_*/attempt_<n>/<local_rank>`` for the rank's restart count, newest first."""
    run = glob.escape(rank.run_id) + "_*" if rank.run_id else "*"
    attempt = rank.env.get("TORCHELASTIC_RESTART_COUNT")
    att = f"attempt_{int(attempt)}" if attempt and attempt.isdigit() else "attempt_*"
    found = glob.glob(os.path.join(glob.escape(base), run, att, str(rank.local_rank)))
    return sorted(found, key=_mtime, reverse=True)[:1]


def _mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0.0


def _read_into(files: list[LogFile], notes: list[str], rank: int | None, kind: LogKind,
               open_path: str, shown: str) -> None:
    who = "launcher" if rank is None else f"rank {rank}"
    try:
        data, truncated, size, skipped = read_bounded(open_path)
    except OSError as exc:
        notes.append(f"{who}: {kind} {shown} is unreadable ({exc.strerror or exc})")
        return
    files.append(LogFile(rank, kind, shown, data, truncated, size, skipped, open_path))
    if truncated:
        notes.append(f"{who}: {kind} {shown} is {size} bytes: kept the first "
                     f"{HEAD_BYTES >> 10} KiB and the last {TAIL_BYTES >> 20} MiB, "
                     f"skipped {skipped} bytes in between")
    if shown.endswith(" (deleted)"):
        notes.append(f"{who}: {kind} {shown}: the file was deleted while the process writes it")


def _describe(what: str, link: str) -> str:
    return {"tty": f"a terminal ({link})", "pipe": f"a pipe ({link})",
            "socket": f"a socket ({link})", "devnull": "/dev/null", "closed": "closed",
            "unreadable": f"unreadable ({link})"}.get(what, f"not a regular file ({link})")


def _cwd(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return None


def _resolve(path: str, cwd: str | None) -> str:
    if os.path.isabs(path) or cwd is None:
        return path
    return os.path.join(cwd, path)
