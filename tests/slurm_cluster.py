"""A real SLURM cluster on this machine, for tests: one slurmctld and two virtual nodes.

Uses Debian's ``slurmd slurmctld slurm-client`` (22.05 on bookworm; ``make install`` installs them
where apt-get exists) and installs nothing itself. Everything lives in a tmp folder: a slurm.conf
with ``AuthType=auth/none`` and ``CredType=cred/none`` (no munge), ``ProctrackType=
proctrack/linuxproc`` and ``TaskPlugin=task/none`` (no cgroups), state and spool folders, and
free ports: ``NodeName=nX NodeAddr=127.0.0.1 Port=P`` per node, one ``slurmd -D -N nX`` each.
Clients and daemons find it through ``SLURM_CONF``. Start-up takes about a second.

What this Slurm needs, found by trying: the per-node spool folder (``SlurmdSpoolDir=.../%n``)
must exist before slurmd starts (it puts its socket there); ``SlurmdParameters=config_overrides``
lets two nodes claim the machine's CPUs. Jobs need root (``SlurmUser=root``), hence the skip.

Teardown, also after a failure: ``scancel`` every job, stop each daemon by its pid (SIGTERM,
then SIGKILL), then SIGKILL every process left whose environment carries this cluster's
``SLURM_CONF`` (job steps whose slurmd was killed outlive it), and wait for them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from leftovers import outlives_the_test

DAEMONS = ("slurmctld", "slurmd", "sinfo", "squeue", "sbatch", "srun", "scancel", "scontrol")


def missing_reason() -> str | None:
    """Why no cluster can start here, or None."""
    absent = [name for name in DAEMONS if shutil.which(name) is None]
    if absent:
        return ("SLURM not installed (" + ", ".join(absent) + "): apt-get install slurmd "
                "slurmctld slurm-client, or `make install` where apt-get exists")
    if os.geteuid() != 0:
        return "the test SLURM cluster runs its daemons as root (SlurmUser=root)"
    return None


def free_ports(count: int) -> list[int]:
    socks = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            socks.append(sock)
        return [sock.getsockname()[1] for sock in socks]
    finally:
        for sock in socks:
            sock.close()


@dataclass
class Cluster:
    root: Path
    nodes: list[str]
    env: dict[str, str]
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)  # daemon name -> it

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    def run(self, *args: str, timeout: float = 30, check: bool = True
            ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(args), env=self.env, capture_output=True, text=True,
                              timeout=timeout, check=check, stdin=subprocess.DEVNULL)

    def sbatch(self, script: str | Path, *args: str, env: dict[str, str] | None = None,
               workdir: Path | None = None) -> str:
        """Submit; returns the job id."""
        full = dict(self.env, **(env or {}))
        done = subprocess.run(["sbatch", "--parsable", "--export=ALL",
                               f"--chdir={workdir or self.root}",
                               f"--output={self.root}/job-%j.out", str(script), *args],
                              env=full, capture_output=True, text=True, timeout=30, check=True)
        return done.stdout.strip().split(";")[0]

    def job_state(self, job_id: str) -> str:
        out = self.run("squeue", "-h", "-j", job_id, "-o", "%T", check=False).stdout.strip()
        return out or "GONE"

    def wait_running(self, job_id: str, timeout: float = 30) -> None:
        wait_for(lambda: self.job_state(job_id) == "RUNNING", timeout,
                 lambda: f"job {job_id} is {self.job_state(job_id)}\n{self.logs()}")

    def kill_job(self, job_id: str) -> None:
        """scancel, then SIGKILL whatever of the job is left (steps on a node whose slurmd is
        dead cannot be cancelled), by pid, and wait for it."""
        self.run("scancel", "--full", job_id, check=False, timeout=10)
        with contextlib.suppress(AssertionError):
            wait_for(lambda: self.job_state(job_id) == "GONE", 15, lambda: "")
        left = [pid for pid in processes_with_env("SLURM_CONF", str(self.conf))
                if environ_has(pid, "SLURM_JOB_ID", job_id)]
        kill_and_wait(left)

    def restart_node(self, node: str) -> None:
        """Start the node's slurmd again (after ``stop_node``). The cluster, not the test that
        called this, stops it: it outlives the test."""
        proc = _daemon(["slurmd", "-D", "-N", node], self.root / f"slurmd-{node}.out", self.env)
        self.procs[f"slurmd-{node}"] = proc
        outlives_the_test(proc.pid)

    def stop_node(self, node: str) -> None:
        """Kill the node's slurmd (SIGKILL: a crashed node); its job processes keep running."""
        proc = self.procs.pop(f"slurmd-{node}")
        proc.kill()
        proc.wait(timeout=10)

    def logs(self) -> str:
        parts = []
        for path in sorted(self.root.glob("*.log")) + sorted(self.root.glob("job-*.out")):
            text = path.read_text(errors="replace").strip().splitlines()[-15:]
            parts.append(f"--- {path.name}\n" + "\n".join(text))
        return "\n".join(parts)


def wait_for(predicate, timeout: float, describe) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s: {describe()}")
        time.sleep(0.2)


def write_conf(root: Path, nodes: list[str], cpus: int) -> None:
    ctld_port, *node_ports = free_ports(1 + len(nodes))
    lines = [
        "ClusterName=hangscope-test",
        "SlurmctldHost=localhost(127.0.0.1)",
        f"SlurmctldPort={ctld_port}",
        "AuthType=auth/none",
        "CredType=cred/none",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SlurmUser=root",
        "SlurmdUser=root",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU",
        "SlurmdParameters=config_overrides",
        "MpiDefault=none",
        "ReturnToService=2",
        "SlurmdTimeout=600",  # a node whose slurmd a test killed is not declared down mid-test
        "MessageTimeout=5",
        "KillWait=2",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none",
        f"StateSaveLocation={root}/state",
        f"SlurmdSpoolDir={root}/spool/%n",
        f"SlurmctldPidFile={root}/slurmctld.pid",
        f"SlurmdPidFile={root}/slurmd-%n.pid",
        f"SlurmctldLogFile={root}/slurmctld.log",
        f"SlurmdLogFile={root}/slurmd-%n.log",
    ]
    lines += [f"NodeName={node} NodeAddr=127.0.0.1 Port={port} CPUs={cpus}"
              for node, port in zip(nodes, node_ports)]
    lines.append(f"PartitionName=test Nodes={','.join(nodes)} Default=YES MaxTime=INFINITE "
                 "State=UP")
    (root / "state").mkdir()
    for node in nodes:
        (root / "spool" / node).mkdir(parents=True)
    (root / "slurm.conf").write_text("\n".join(lines) + "\n")


@contextlib.contextmanager
def slurm_cluster(root: Path, nodes: int = 2, cpus: int = 2) -> Iterator[Cluster]:
    """Start the cluster under ``root``; yields once ``sinfo`` shows every node idle."""
    names = [f"n{i}" for i in range(1, nodes + 1)]
    write_conf(root, names, cpus)
    env = dict(os.environ, SLURM_CONF=str(root / "slurm.conf"))
    for var in [v for v in env if v.startswith(("SLURM_", "SBATCH_", "SRUN_"))]:
        if var != "SLURM_CONF":
            del env[var]  # running inside another allocation must not leak into this one
    cluster = Cluster(root, names, env)
    try:
        cluster.procs["slurmctld"] = _daemon(["slurmctld", "-D"], root / "slurmctld.out", env)
        for node in names:
            cluster.procs[f"slurmd-{node}"] = _daemon(["slurmd", "-D", "-N", node],
                                                      root / f"slurmd-{node}.out", env)
        wait_for(lambda: _idle(cluster) == set(names), 30,
                 lambda: f"nodes not idle: {_idle(cluster)}\n{cluster.logs()}")
        yield cluster
    finally:
        _teardown(cluster)


def _daemon(command: list[str], out: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with open(out, "wb") as handle:
        return subprocess.Popen(command, env=env, stdout=handle, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)


def _idle(cluster: Cluster) -> set[str]:
    for name, proc in cluster.procs.items():
        if proc.poll() is not None:
            raise AssertionError(f"{name} exited with {proc.returncode}\n{cluster.logs()}")
    done = cluster.run("sinfo", "-h", "-N", "-o", "%N %t", check=False, timeout=10)
    return {line.split()[0] for line in done.stdout.splitlines()
            if len(line.split()) == 2 and line.split()[1] == "idle"}


def _teardown(cluster: Cluster) -> None:
    with contextlib.suppress(Exception):
        cluster.run("scancel", "--user", "root", "--full", check=False, timeout=10)
        wait_for(lambda: not cluster.run("squeue", "-h", check=False, timeout=5).stdout.strip(),
                 10, lambda: "jobs left")
    for proc in cluster.procs.values():
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()
    for proc in cluster.procs.values():
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    kill_and_wait(processes_with_env("SLURM_CONF", str(cluster.conf)))


def kill_and_wait(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not [p for p in pids if _alive(p)], 10,
             lambda: f"still alive: {[p for p in pids if _alive(p)]}")


def environ_has(pid: int, name: str, value: str) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            return f"{name}={value}".encode() in handle.read().split(b"\0")
    except OSError:
        return False


def processes_with_env(name: str, value: str) -> list[int]:
    """Pids (not ours) whose environment has ``name=value``."""
    needle = f"{name}={value}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as handle:
                if needle in handle.read().split(b"\0"):
                    found.append(int(entry))
        except OSError:
            continue
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().split(b")")[-1].split()[0] != b"Z"
    except OSError:
        return False


@pytest.fixture(scope="module", name="slurm")
def slurm_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A two-node cluster for the module; skipped with the reason where it cannot run."""
    reason = missing_reason()
    if reason:
        pytest.skip(reason)
    with slurm_cluster(tmp_path_factory.mktemp("slurm")) as cluster:
        yield cluster
