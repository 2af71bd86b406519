"""What discovery returns: the job's launchers and ranks on this host, and what it could not see."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class ProcInfo:
    """A process we looked at (a launcher, usually): enough to cite it and find its logs."""

    pid: int
    ppid: int
    name: str
    cmdline: list[str]
    create_time: float
    kind: str = ""  # launcher kind ("torchrun", "mpirun"...), "" for other processes
    status: str = ""


@dataclass(slots=True)
class RankProcess:
    """One live rank on this host, with the identity its launcher gave it."""

    pid: int
    rank: int
    local_rank: int | None
    world_size: int | None
    local_world_size: int | None
    group_rank: int | None
    run_id: str | None
    master_addr: str | None
    master_port: int | None
    env: dict[str, str]
    cmdline: list[str]
    workers: list[int]
    create_time: float
    identity_from: str = "RANK"  # the variable the rank number came from


@dataclass(slots=True)
class JobProcesses:
    """What ``discover`` found; ``notes`` say what it could not see and why."""

    launchers: list[ProcInfo]
    ranks: list[RankProcess]
    searched: str
    host: str
    expected_local_ranks: set[int] = field(default_factory=set)
    missing_local_ranks: list[int] = field(default_factory=list)
    # rank -> what tells that its process exited before the look (an orphan of it that carries
    # its identity): no process of its own is left to read, yet this is a fact, not an absence
    exited_ranks: dict[int, str] = field(default_factory=dict)
    # rank -> (pid, what tells it is that rank): an exited rank its launcher has not reaped yet
    zombie_ranks: dict[int, tuple[int, str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def rank_pids(self) -> dict[int, int]:
        return {r.rank: r.pid for r in self.ranks}
