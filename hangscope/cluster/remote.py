"""ssh and Kubernetes fan-out: one ``hangscope collect`` per host (``--ssh HOST``) or pod
(``--k8s-pods`` / ``--k8s-selector``), each bundle streamed back as a tar on the client's stdout,
then one merged analysis. No shared filesystem and no ``kubectl cp`` are needed.

Every host or pod runs the same POSIX shell script (``remote_script``)::

    d=$(mktemp -d "${TMPDIR:-/tmp}/hangscope-collect.XXXXXX") || exit 125
    trap 'rm -rf "$d"' EXIT; trap 'exit 143' HUP INT TERM
    PYTHON -m hangscope collect SELECTOR... --out "$d/bundle" --quiet --timeout S >&2 || exit $?
    tar -C "$d/bundle" -cf - .

through ``ssh -T -o BatchMode=yes -o ConnectTimeout=N HOST 'sh -c ...'`` or
``kubectl exec POD [-n NS] [-c CONTAINER] -- sh -c ...``; pods of ``--k8s-selector`` come from
``kubectl get pods -l SEL [-n NS] --field-selector=status.phase=Running -o
jsonpath={.items[*].metadata.name}``. The remote ``PYTHON`` (``--remote-python``, default
``python3``) must have hangscope and py-spy installed; the remote needs ``sh``, ``mktemp`` and
``tar``.

Bounds: the remote collection gets a ``--timeout`` a few seconds shorter than ours; at our deadline
each client still running gets SIGTERM, then SIGKILL, by its process group, and so does one whose
stream grows past ``MAX_TAR_BYTES``. A host that sent no bundle becomes an evidence gap naming it.

The tar is untrusted (a compromised host, a wrapper that prints to stdout): ``unpack_bundle``
reads it whole first and refuses it, in one line, if a member is a link, a device, an absolute
path or one that leaves the bundle, or if it holds too many members or bytes; only then is it
extracted, with tarfile's ``data`` filter as a second guard.
"""

from __future__ import annotations

import os
import posixpath
import re
import shlex
import shutil
import subprocess
import tarfile
import time
from dataclasses import dataclass

from hangscope.bundle import is_bundle
from hangscope.cluster.runner import (
    FanoutResult,
    Finish,
    NodeResult,
    Step,
    last_line,
    run_steps,
    stopped,
)
from hangscope.errors import CollectError, UsageError

MAX_TAR_BYTES = 2 << 30  # one node's bundle: FR dumps, stacks, log excerpts of its ranks
MAX_MEMBERS = 100_000
_MARGIN = 5.0  # seconds kept back from --timeout for connecting and streaming the bundle back
_LIST_TIMEOUT = 15.0


class UnsafeBundle(Exception):
    """A bundle archive that must not be unpacked; the message says why, in one line."""


class UnreadableBundle(UnsafeBundle):
    """What came back is no tar archive (or a truncated one)."""


@dataclass(frozen=True, slots=True)
class RemoteTarget:
    """Where to collect: ``transport`` is ``ssh`` (``targets`` are hosts) or ``kubectl``
    (``targets`` are pods, or ``selector`` lists them)."""

    transport: str
    targets: tuple[str, ...] = ()
    selector: str | None = None
    namespace: str | None = None
    container: str | None = None
    python: str = "python3"


@dataclass(frozen=True, slots=True)
class RemoteOptions:
    target: RemoteTarget
    out_dir: str  # one bundle per host under OUT_DIR/<host>; clients' logs in OUT_DIR/.remote
    timeout: float = 60.0
    collect_args: tuple[str, ...] = ()  # the job selector and collection options, as on a host


def remote_script(python: str, collect_args: tuple[str, ...], remote_timeout: float) -> str:
    """The shell script each host runs: collect into a temporary folder, write it to stdout as
    a tar, remove the folder (also when collect fails or the script is signalled)."""
    collect = shlex.join([python, "-m", "hangscope", "collect", *collect_args])
    return ('d=$(mktemp -d "${TMPDIR:-/tmp}/hangscope-collect.XXXXXX") || exit 125\n'
            "trap 'rm -rf \"$d\"' EXIT\n"
            "trap 'exit 143' HUP INT TERM\n"
            f'{collect} --out "$d/bundle" --quiet --timeout {remote_timeout:g} >&2 || exit $?\n'
            'tar -C "$d/bundle" -cf - .\n')


def client_command(target: RemoteTarget, name: str, script: str, timeout: float) -> list[str]:
    """The local command that runs ``script`` on host or pod ``name``."""
    if target.transport == "ssh":
        connect = max(1, min(10, int(timeout / 2)))
        # ssh hands its command to the remote login shell as one string
        return ["ssh", "-T", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={connect}", name,
                shlex.join(["sh", "-c", script])]
    return ["kubectl", "exec", name, *_kube_scope(target), "--", "sh", "-c", script]


def list_pods(target: RemoteTarget, timeout: float) -> list[str]:
    """The running pods that ``target.selector`` selects, by ``kubectl get pods``."""
    command = ["kubectl", "get", "pods", "-l", target.selector or "",
               *(["-n", target.namespace] if target.namespace else []),
               "--field-selector=status.phase=Running",
               "-o", "jsonpath={.items[*].metadata.name}"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                              check=False, stdin=subprocess.DEVNULL, start_new_session=True)
    except FileNotFoundError:
        raise CollectError("kubectl is not on the PATH") from None
    except subprocess.TimeoutExpired:
        raise CollectError(f"{shlex.join(command)} did not answer within {timeout:g} s") from None
    if done.returncode != 0:
        reason = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        raise CollectError(f"{shlex.join(command)}: {reason}")
    pods = done.stdout.split()
    if not pods:
        where = f" in namespace {target.namespace}" if target.namespace else ""
        raise CollectError(f"no running pod matches -l {target.selector}{where}")
    return pods


def fan_out_remote(options: RemoteOptions) -> FanoutResult:
    """Collect on every host or pod at once, bounded by ``options.timeout`` in all (listing
    the pods included); never raises for one that fails (its NodeResult says why)."""
    started = time.monotonic()
    target = options.target
    client = "ssh" if target.transport == "ssh" else "kubectl"
    if shutil.which(client) is None:
        raise CollectError(f"{client} is not on the PATH")
    names = list(target.targets)
    if target.selector is not None:
        names = list_pods(target, min(_LIST_TIMEOUT, options.timeout))
    if len(set(names)) != len(names):
        raise UsageError(f"{_noun(target)} {_first_repeat(names)} is given twice")
    dirs = _dir_names(names)
    taken = [d for d in dirs if os.path.lexists(os.path.join(options.out_dir, d))]
    if taken:
        raise UsageError(f"{os.path.join(options.out_dir, taken[0])}: exists already; "
                         "give an empty --out")
    logs = os.path.join(options.out_dir, ".remote")
    os.makedirs(logs, exist_ok=True)
    left = options.timeout - (time.monotonic() - started)
    script = remote_script(target.python, options.collect_args, max(3.0, left - _MARGIN))
    steps = [Step(name, os.path.join(options.out_dir, d),
                  client_command(target, name, script, left),
                  os.path.join(logs, f"{d}.tar"), os.path.join(logs, f"{d}.log"))
             for name, d in zip(names, dirs, strict=True)]
    label = "ssh" if target.transport == "ssh" else "kubectl" + (
        f" (namespace {target.namespace})" if target.namespace else "")
    result = FanoutResult(label, _noun(target))
    result.nodes = run_steps(steps, options.timeout, _outcome(client), started=started,
                             max_output=MAX_TAR_BYTES)
    result.seconds = time.monotonic() - started
    return result


def unpack_bundle(archive: str, dest: str) -> None:
    """Extract a bundle tar into ``dest`` (which must not exist), or raise UnsafeBundle naming
    the first thing wrong with it, extracting nothing."""
    try:
        with tarfile.open(archive, "r:") as tar:
            members = _checked_members(tar)
            os.makedirs(dest)
            if hasattr(tarfile, "data_filter"):  # Python 3.10.12+, 3.11.4+
                tar.extractall(dest, members=members, filter="data")
            else:  # the checks above already refuse what the filter would
                tar.extractall(dest, members=members)
    except tarfile.TarError as exc:
        shutil.rmtree(dest, ignore_errors=True)
        raise UnreadableBundle(f"not a tar archive ({exc})") from None
    except UnsafeBundle:
        shutil.rmtree(dest, ignore_errors=True)
        raise


def _checked_members(tar: tarfile.TarFile) -> list[tarfile.TarInfo]:
    members: list[tarfile.TarInfo] = []
    total = 0
    for member in tar:
        name = member.name
        if len(members) >= MAX_MEMBERS:
            raise UnsafeBundle(f"more than {MAX_MEMBERS} members")
        if member.issym() or member.islnk():
            raise UnsafeBundle(f"member {name!r} is a link (to {member.linkname!r})")
        if not (member.isfile() or member.isdir()):
            raise UnsafeBundle(f"member {name!r} is not a file or folder")
        parts = posixpath.normpath(name).split("/")
        if name.startswith("/") or ".." in parts:
            raise UnsafeBundle(f"member {name!r} leaves the bundle")
        total += member.size
        if total > MAX_TAR_BYTES:
            raise UnsafeBundle(f"more than {MAX_TAR_BYTES >> 20} MiB")
        members.append(member)
    return members


def _outcome(client: str) -> Finish:
    def finish(step: Step, code: int | None, seconds: float, why: str) -> NodeResult:
        archive = step.stdout
        try:
            if code is None:
                return stopped(step, why, seconds)
            if code != 0 or os.path.getsize(archive) == 0:
                last = last_line(step.stderr)
                return NodeResult(step.node, step.bundle, "failed",
                                  f"sent no bundle ({client} exit {code}"
                                  + (f": {last}" if last else "") + ")", seconds)
            try:
                unpack_bundle(archive, step.bundle)
            except UnreadableBundle as exc:
                return NodeResult(step.node, step.bundle, "failed",
                                  f"sent no readable bundle: {exc}; does a login script print "
                                  "to stdout?", seconds)
            except UnsafeBundle as exc:
                return NodeResult(step.node, step.bundle, "failed",
                                  f"sent an unsafe bundle, refused: {exc}", seconds)
            if not is_bundle(step.bundle):
                shutil.rmtree(step.bundle, ignore_errors=True)
                return NodeResult(step.node, step.bundle, "failed",
                                  "sent an archive without a bundle manifest", seconds)
            return NodeResult(step.node, step.bundle, "ok", "", seconds)
        finally:
            try:
                os.unlink(archive)  # the bundle holds it all; keep only the client's log
            except OSError:
                pass

    return finish


def _kube_scope(target: RemoteTarget) -> list[str]:
    return [*(["-n", target.namespace] if target.namespace else []),
            *(["-c", target.container] if target.container else [])]


def _noun(target: RemoteTarget) -> str:
    return "host" if target.transport == "ssh" else "pod"


def _first_repeat(names: list[str]) -> str:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            return name
        seen.add(name)
    return ""


def _dir_names(names: list[str]) -> list[str]:
    """A folder name per host (``user@host:22`` -> ``user_host_22``), unique, never hidden."""
    dirs: list[str] = []
    for name in names:
        base = re.sub(r"[^A-Za-z0-9._-]+", "_", name).lstrip(".") or "host"
        candidate, n = base, 1
        while candidate in dirs:
            n += 1
            candidate = f"{base}-{n}"
        dirs.append(candidate)
    return dirs
