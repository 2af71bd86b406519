"""The bounded parallel runner under every fan-out (SLURM steps, ssh, kubectl exec): one local
process per node, all started at once (at most ``MAX_PARALLEL`` at a time), each with its output in
a file, every one stopped by its process group at one shared deadline.

It never raises for a node: each ends as a ``NodeResult`` (ok, failed or timeout, and why), and a
node that sent nothing becomes an evidence gap naming it (``node_gaps``) so that the verdict says
it is partial.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from hangscope.ranges import format_ranks

log = logging.getLogger(__name__)

MAX_PARALLEL = 64  # local client processes (srun, ssh, kubectl) at once


@dataclass(slots=True)
class NodeResult:
    node: str
    bundle: str
    status: str  # ok | failed | timeout
    detail: str = ""
    seconds: float = 0.0
    sent_at: float | None = None  # this host's wall clock when the node's client started
    back_at: float | None = None  # ... and when it was seen to end


@dataclass(slots=True)
class FanoutResult:
    """What came back from every node; ``label`` names the fan-out ("SLURM job 42", "ssh"),
    ``noun`` what a node is called there (node, host, pod)."""

    label: str
    noun: str = "node"
    nodes: list[NodeResult] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def bundles(self) -> list[str]:
        return [n.bundle for n in self.nodes if n.status == "ok"]

    @property
    def missing(self) -> list[NodeResult]:
        return [n for n in self.nodes if n.status != "ok"]

    def tally(self) -> str:
        text = f"{self.label}: {len(self.bundles)} of {len(self.nodes)} {self.noun}s collected"
        if self.missing:
            text += " (missing: " + ", ".join(n.node for n in self.missing) + ")"
        return text

    def nothing(self) -> str:
        """The one line of a fan-out where no node sent a bundle."""
        reasons = "; ".join(f"{n.node}: {n.detail}" for n in self.nodes[:4])
        more = f"; and {len(self.nodes) - 4} more" if len(self.nodes) > 4 else ""
        return f"{self.label}: no {self.noun} sent a bundle ({reasons}{more})"


@dataclass(frozen=True, slots=True)
class Step:
    """One node's local client process: ``command``, its stdout into ``stdout`` and its stderr
    into ``stderr`` (the same file when equal)."""

    node: str
    bundle: str
    command: list[str]
    stdout: str
    stderr: str


# finish(step, exit code or None when it did not exit by itself, seconds, why not) -> NodeResult
Finish = Callable[[Step, "int | None", float, str], NodeResult]


def run_steps(steps: Sequence[Step], timeout: float, finish: Finish, *, started: float,
              max_output: int | None = None) -> list[NodeResult]:
    """Run every step, at most MAX_PARALLEL at once, until each exits or ``timeout`` seconds
    after ``started`` (a ``time.monotonic()`` value); the steps still running then are stopped
    together (SIGTERM to each process group, SIGKILL 3 s later), as is one whose output (stdout
    and stderr) grows past ``max_output`` bytes, and every one still running when this is
    interrupted (SIGINT, an exception). ``finish`` turns each into a NodeResult (``stopped``
    helps); results come back in the order of ``steps``."""
    deadline = started + timeout
    late = f"did not answer within {timeout:g} s"
    pending = list(steps)
    running: dict[str, tuple[Step, subprocess.Popen[bytes], float]] = {}
    results: dict[str, NodeResult] = {}
    sent: dict[str, float] = {}
    try:
        while pending or running:
            while pending and len(running) < MAX_PARALLEL and time.monotonic() < deadline:
                step = pending.pop(0)
                try:
                    sent[step.node] = time.time()
                    running[step.node] = (step, _start(step), time.monotonic())
                except OSError as exc:
                    results[step.node] = finish(step, None, 0.0, f"could not start "
                                                f"{step.command[0]} ({exc.strerror or exc})")
            cut: dict[str, str] = {}
            for node, (step, proc, t0) in list(running.items()):
                if proc.poll() is not None:
                    del running[node]
                    results[node] = finish(step, proc.returncode, time.monotonic() - t0, "")
                    results[node].sent_at, results[node].back_at = sent[node], time.time()
                elif max_output is not None and _output(step) > max_output:
                    cut[node] = f"sent more than {max_output >> 20} MiB"
                elif time.monotonic() >= deadline:
                    cut[node] = late
            if cut:
                stop_groups([running[node][1] for node in cut])
                for node, why in cut.items():
                    step, _, t0 = running.pop(node)
                    results[node] = finish(step, None, time.monotonic() - t0, why)
            if time.monotonic() >= deadline:
                for step in pending:
                    results[step.node] = finish(step, None, 0.0, f"{late} (never started)")
                pending.clear()
            if running:
                time.sleep(0.05)
    finally:
        stop_groups([proc for _, proc, _ in running.values()])
    return [results[step.node] for step in steps]


def stopped(step: Step, why: str, seconds: float) -> NodeResult:
    """The result of a step that did not exit by itself: ``timeout`` when the deadline cut it."""
    status = "timeout" if why.startswith("did not answer") else "failed"
    return NodeResult(step.node, step.bundle, status, why, seconds)


def stop_groups(procs: Sequence[subprocess.Popen[bytes]], grace: float = 3.0) -> None:
    """SIGTERM the process group each client leads (srun then cancels its step; ssh and kubectl
    close their connection), SIGKILL those left after ``grace`` seconds; all reaped."""
    for proc in procs:
        _signal_group(proc, signal.SIGTERM)
    end = time.monotonic() + grace
    for proc in procs:
        try:
            proc.wait(timeout=max(0.0, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for proc in procs:
        _signal_group(proc, signal.SIGKILL)  # also what the client left behind in its group
        if proc.poll() is None:
            proc.kill()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            log.warning("pid %d survived SIGKILL", proc.pid)


def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def node_gaps(result: FanoutResult, ranks_seen: set[int], world_size: int | None) -> list[str]:
    """One evidence gap per node that sent no bundle, naming the ranks no bundle holds."""
    missing = sorted(set(range(world_size or 0)) - ranks_seen)
    gaps = []
    for node in result.missing:
        held = f": ranks {format_ranks(missing)} missing" if missing else ""
        if missing and len(result.missing) > 1:
            held = f": ranks {format_ranks(missing)} missing (on this {result.noun} or another " \
                   f"of {', '.join(n.node for n in result.missing)})"
        gaps.append(f"{result.noun} {node.node} {node.detail}{held}")
    return gaps


def last_line(path: str, *, first_error: bool = False) -> str:
    """The line of a client's log that says most: a crashed hangscope's exception; else the
    first line naming an error (``first_error``: srun's first says most) or the last one."""
    try:
        with open(path, "rb") as handle:
            handle.seek(max(0, os.path.getsize(path) - 4096))
            lines = handle.read().decode("utf-8", "replace").strip().splitlines()
    except OSError:
        return ""
    lines = [line for line in lines if line.strip()]
    if any(line.startswith("Traceback") for line in lines):  # the remote hangscope crashed
        errors = [line for line in lines if not line.startswith(("srun:", " "))]
        return (errors or [""])[-1].strip()[:300]
    errors = [line for line in lines if "error" in line.lower()]
    if errors:
        return errors[0 if first_error else -1].strip()[:300]
    return (lines or [""])[-1].strip()[:300]


def _start(step: Step) -> subprocess.Popen[bytes]:
    log.info("%s: %s", step.node, " ".join(step.command))
    with open(step.stdout, "wb") as out:
        if step.stderr == step.stdout:
            return subprocess.Popen(step.command, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        with open(step.stderr, "wb") as err:
            return subprocess.Popen(step.command, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=err, start_new_session=True)


def _output(step: Step) -> int:
    """Bytes the client wrote so far, stdout and stderr."""
    return _size(step.stdout) + (_size(step.stderr) if step.stderr != step.stdout else 0)


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0
