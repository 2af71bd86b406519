"""Why we may not read a rank (ptrace, /proc), diagnosed in layers before collection starts.

py-spy needs ptrace-level access to a rank. When it is refused, the kernel says little ("Operation
not permitted", or even "No such process"), so we check the usual causes in order and name the
first that applies, with its fix:

1. the pid does not exist;
2. it belongs to another uid (``os.kill(pid, 0)`` raises PermissionError);
3. Yama ``kernel.yama.ptrace_scope`` > 0 and we are neither root nor hold CAP_SYS_PTRACE
   (3 forbids ptrace for everyone until reboot);
4. we are root in a container that dropped CAP_SYS_PTRACE (``/proc/self/status`` CapEff bit 19).

Yama also makes some attaches fail with ESRCH while ``/proc/PID`` exists: ``explain_failure``
turns such an errno from a collector into the same kind of answer. Each reading comes from a
``Readers`` object so that tests (which run as root) can inject the other cases.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import psutil

from hangscope.errors import ExitCode, HangscopeError

CAP_SYS_PTRACE = 19
PTRACE_SCOPE_PATH = "/proc/sys/kernel/yama/ptrace_scope"

PTRACE_HELP = (
    "hangscope reads Python stacks with py-spy, which needs ptrace access to every rank. "
    "Run it as the user who owns the job or as root, keeping the environment: "
    "`sudo -E hangscope attach ...`. If Yama restricts ptrace (kernel.yama.ptrace_scope > 0), "
    "allow it until reboot with `sudo sysctl kernel.yama.ptrace_scope=0` (a value of 3 cannot be "
    "lowered without a reboot); at ptrace_scope=1 a job may instead allow any tracer itself by "
    "calling `prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY)` in each rank at start. In Docker, "
    "start the container with `docker run "
    "--cap-add=SYS_PTRACE ...` (and `--security-opt seccomp=unconfined` on old Docker or "
    "kernels < 4.8); in Kubernetes add `securityContext: {capabilities: {add: [SYS_PTRACE]}}` to "
    "the container that runs hangscope and share the process namespace with the job "
    "(`shareProcessNamespace: true`, or run inside the job's container)."
)

_FIX_OWNER = "run hangscope as the job's user or as root: sudo -E hangscope ..."
_FIX_YAMA = ("run as root (sudo -E hangscope ...) or allow ptrace: "
             "sudo sysctl kernel.yama.ptrace_scope=0")
# What each Yama value needs (Documentation/admin-guide/LSM/Yama.rst): 1 lets a process trace
# only its descendants or a process that named it (or anyone) with PR_SET_PTRACER; 2 needs
# CAP_SYS_PTRACE; 3 forbids ptrace until reboot.
_FIX_YAMA_1 = ("run as root (sudo -E hangscope ...), or set kernel.yama.ptrace_scope to 0 "
               "(sudo sysctl kernel.yama.ptrace_scope=0), or have the job call "
               "prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY) in each rank at start")
_FIX_YAMA_2 = ("run as root or with CAP_SYS_PTRACE (sudo -E hangscope ...), or lower "
               "kernel.yama.ptrace_scope to 0 (sudo sysctl kernel.yama.ptrace_scope=0), or to 1 "
               "with a job that calls prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY)")
_YAMA_MEANING = {1: "only a parent may trace its children", 2: "only CAP_SYS_PTRACE may trace"}
_FIX_CAP = ("give the container CAP_SYS_PTRACE: docker run --cap-add=SYS_PTRACE, or Kubernetes "
            "securityContext.capabilities.add: [SYS_PTRACE]")
_FIX_POLICY = ("a seccomp/AppArmor/SELinux policy blocks ptrace: docker run --cap-add=SYS_PTRACE "
               "--security-opt seccomp=unconfined, or relax the policy")


class PtraceDenied(HangscopeError):
    """No rank of the job may be traced: nothing but logs and dumps can be collected."""

    exit_code = ExitCode.COULD_NOT_COLLECT
    help_text = PTRACE_HELP


@dataclass(frozen=True, slots=True)
class AccessProblem:
    """One rank we may not read: a one-line cause and the fix for it (goes to evidence gaps)."""

    pid: int
    cause: str
    fix: str

    def line(self) -> str:
        return f"pid {self.pid}: {self.cause} (fix: {self.fix})"


def _signal0(pid: int) -> None:
    os.kill(pid, 0)


def _read_ptrace_scope() -> int | None:
    """None when Yama is not built in (then only uids and capabilities matter)."""
    try:
        with open(PTRACE_SCOPE_PATH, encoding="ascii") as handle:
            return int(handle.read().strip())
    except (OSError, ValueError):
        return None


def _read_cap_eff() -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as handle:
            for line in handle:
                if line.startswith("CapEff:"):
                    return int(line.split()[1], 16)
    except (OSError, ValueError, IndexError):
        pass
    return None


def _in_container() -> bool:
    if os.path.exists("/.dockerenv") or os.path.exists("/run/.containerenv"):
        return True
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return True
    try:
        with open("/proc/1/cgroup", encoding="utf-8", errors="replace") as handle:
            text = handle.read()
    except OSError:
        return False
    return any(word in text for word in ("docker", "kubepods", "containerd", "lxc", "podman"))


def _is_our_descendant(pid: int) -> bool:
    try:
        return any(p.pid == os.getpid() for p in psutil.Process(pid).parents())
    except psutil.Error:
        return False


def _target_uid(pid: int) -> int | None:
    try:
        return int(psutil.Process(pid).uids().effective)
    except psutil.Error:
        return None


@dataclass(slots=True)
class Readers:
    """Where each reading comes from. The defaults read this machine; tests replace fields."""

    pid_exists: Callable[[int], bool] = psutil.pid_exists
    signal0: Callable[[int], None] = _signal0
    euid: Callable[[], int] = os.geteuid
    ptrace_scope: Callable[[], int | None] = _read_ptrace_scope
    cap_eff: Callable[[], int | None] = _read_cap_eff
    in_container: Callable[[], bool] = _in_container
    proc_dir_exists: Callable[[int], bool] = field(
        default=lambda pid: os.path.isdir(f"/proc/{pid}"))
    is_descendant: Callable[[int], bool] = _is_our_descendant
    target_uid: Callable[[int], int | None] = _target_uid


def diagnose(pid: int, readers: Readers | None = None) -> AccessProblem | None:
    """The first layer that forbids reading ``pid``, or None when nothing visible does."""
    r = readers or Readers()
    if not r.pid_exists(pid):
        return AccessProblem(pid, "the process does not exist (it exited)",
                             "check the rank's log for why it ended; re-run attach")
    euid = r.euid()
    try:
        r.signal0(pid)
    except ProcessLookupError:
        return AccessProblem(pid, "the process exited while we checked it",
                             "check the rank's log for why it ended; re-run attach")
    except PermissionError:
        owner = r.target_uid(pid)
        whose = f"uid {owner}" if owner is not None else "another user"
        return AccessProblem(pid, f"the process belongs to {whose} and we run as uid {euid}",
                             _FIX_OWNER)
    cap = r.cap_eff()
    has_cap = cap is not None and bool(cap >> CAP_SYS_PTRACE & 1)
    scope = r.ptrace_scope()
    if scope is not None and scope >= 3:
        return AccessProblem(pid, "kernel.yama.ptrace_scope is 3: ptrace is disabled for every "
                                  "process, root included", "reboot with ptrace_scope below 3")
    blocked_by_yama = (scope == 2 or (scope == 1 and not r.is_descendant(pid))) and not has_cap
    if blocked_by_yama and euid != 0:
        return AccessProblem(pid, f"kernel.yama.ptrace_scope is {scope} and we are not root "
                                  f"(uid {euid}, no CAP_SYS_PTRACE; {scope} means "
                                  f"{_YAMA_MEANING.get(scope or 0, 'restricted')})",
                             _FIX_YAMA_1 if scope == 1 else _FIX_YAMA_2)
    if blocked_by_yama:
        where = "in a container that dropped" if r.in_container() else "without"
        return AccessProblem(pid, f"we run as root {where} CAP_SYS_PTRACE while "
                                  f"kernel.yama.ptrace_scope is {scope}", _FIX_CAP)
    owner = r.target_uid(pid)
    if not has_cap and owner is not None and owner != euid:
        where = " in a container" if r.in_container() else ""
        return AccessProblem(pid, f"the process runs as uid {owner}; we run as uid {euid}"
                                  f"{where} without CAP_SYS_PTRACE", _FIX_CAP)
    return None


def explain_failure(pid: int, err: int | OSError, readers: Readers | None = None
                    ) -> AccessProblem:
    """Turn a collector's errno (from ptrace, process_vm_readv, py-spy) into cause and fix.

    Classifies by errno, never by message text. Yama can answer ESRCH ("no such process") for a
    process that still exists: if ``/proc/PID`` is there, that is a refusal, not a dead rank.
    """
    r = readers or Readers()
    code = err.errno if isinstance(err, OSError) else err
    found = diagnose(pid, r)
    if found is not None:
        return found
    if code == errno.ESRCH and r.proc_dir_exists(pid):
        return AccessProblem(pid, f"the kernel answered 'no such process' although /proc/{pid} "
                                  f"exists: ptrace was refused (Yama or a container policy)",
                             _FIX_YAMA + "; in a container: " + _FIX_CAP)
    if code == errno.ESRCH:
        return AccessProblem(pid, "the process exited during collection",
                             "check the rank's log for why it ended")
    if code in (errno.EPERM, errno.EACCES):
        return AccessProblem(pid, "ptrace was refused although uid, Yama and capabilities allow "
                                  "it", _FIX_POLICY)
    name = errno.errorcode.get(code or 0, str(code))
    return AccessProblem(pid, f"reading the process failed ({name})", "see PTRACE help below")


def check_access(pids: Iterable[int], readers: Readers | None = None) -> dict[int, AccessProblem]:
    """The pids we may not read, each with its problem; readable pids are absent."""
    r = readers or Readers()
    found = {pid: diagnose(pid, r) for pid in pids}
    return {pid: problem for pid, problem in found.items() if problem is not None}


def require_access(pids: Iterable[int], readers: Readers | None = None) -> dict[int, AccessProblem]:
    """Like ``check_access``, but raise PtraceDenied when not one pid can be read."""
    wanted = list(pids)
    problems = check_access(wanted, readers)
    if wanted and len(problems) == len(wanted):
        first = problems[wanted[0]]
        more = f" (and {len(wanted) - 1} more)" if len(wanted) > 1 else ""
        raise PtraceDenied(f"cannot read any rank: {first.line()}{more}")
    return problems
