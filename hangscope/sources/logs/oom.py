# ruff: noqa: E501  (the docstring quotes raw log lines verbatim)
"""Out-of-memory: CUDA caching-allocator OOMs (``c10/cuda/CUDACachingAllocator.cpp``) and kernel OOM
kills (``mm/oom_kill.c``: ``dump_oom_summary``/``__oom_kill_process``).

``cuda_oom``::

    # torch >= 2.1 (torch.OutOfMemoryError since 2.2; torch.cuda.OutOfMemoryError before)
    torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.02 GiB is free. Including non-PyTorch memory, this process has 78.12 GiB memory in use. Of the allocated memory 75.40 GiB is allocated by PyTorch, and 1.21 GiB is reserved by PyTorch but unallocated. ...
    # torch 1.x-2.0
    RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 15.78 GiB total capacity; 14.12 GiB already allocated; 3.19 MiB free; 14.58 GiB reserved in total by PyTorch) ...
    # from a CUDA call outside the allocator
    RuntimeError: CUDA error: out of memory

  fields (bytes): tried_bytes, capacity_bytes, free_bytes, in_use_bytes, allocated_bytes,
  reserved_bytes; gpu (index).

``host_oom_kill`` (dmesg / journalctl -k / syslog)::

    [ 8123.456789] oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=...,mems_allowed=0-1,oom_memcg=/kubepods/pod1,task_memcg=/kubepods/pod1/c1,task=python,pid=40123,uid=1000
    [ 8123.456901] Memory cgroup out of memory: Killed process 40123 (python) total-vm:98765432kB, anon-rss:45678912kB, file-rss:123456kB, shmem-rss:0kB, UID:1000 pgtables:98765kB oom_score_adj:0
    [ 8123.456901] Out of memory: Killed process 40123 (python) total-vm:... (global OOM)

  fields: pid, process, cgroup (task_memcg or oom_memcg), constraint, total_vm_kb, anon_rss_kb,
  memcg (1 for a cgroup OOM), uptime_s (the kernel timestamp, seconds since boot).
"""

from __future__ import annotations

import re

from hangscope.model import LogEvent
from hangscope.sources.logs.base import Follow, Handler
from hangscope.sources.logs.common import Context, Line, make_event, size_bytes

_TRIED = re.compile(r"Tried to allocate ([\d.]+ ?[KMGT]?i?B)")
_NEW_CAP = re.compile(r"GPU (\d+) has a total capacity of ([\d.]+ ?[KMGT]?i?B) of which "
                      r"([\d.]+ ?[KMGT]?i?B) is free")
_NEW_USE = re.compile(r"this process has ([\d.]+ ?[KMGT]?i?B) memory in use")
_NEW_ALLOC = re.compile(r"Of the allocated memory ([\d.]+ ?[KMGT]?i?B) is allocated by PyTorch, "
                        r"and ([\d.]+ ?[KMGT]?i?B) is reserved")
_OLD = re.compile(r"\(GPU (\d+); ([\d.]+ ?[KMGT]?i?B) total capacity; ([\d.]+ ?[KMGT]?i?B) already "
                  r"allocated; ([\d.]+ ?[KMGT]?i?B) free; ([\d.]+ ?[KMGT]?i?B) reserved")


# The same fault in other runtimes' words: ROCm/HIP, TensorFlow's BFC allocator, NCCL's CUDA calls.
_GPU_OOM_WORDS = ("CUDA out of memory", "CUDA error: out of memory", "HIP out of memory",
                  "hipErrorOutOfMemory", "OOM when allocating tensor", "Cuda failure 'out of memory'",
                  "Cuda failure 2 'out of memory'")
_DEVICE_GPU = re.compile(r"device:GPU:(\d+)")


def cuda_oom(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    body = line.body
    if not any(word in body for word in _GPU_OOM_WORDS):
        return []
    fields: dict[str, str | int | float] = {}
    head = body.split(":", 1)[0] if ": CUDA" in body else ""
    if head and " " not in head.strip():
        fields["exc_type"] = head.strip()
        fields["exc_message"] = body.split(":", 1)[1].strip()[:500]  # what a finding quotes

    def put(key: str, text: str) -> None:
        value = size_bytes(text)
        if value is not None:
            fields[key] = value

    if (m := _TRIED.search(body)) is not None:
        put("tried_bytes", m.group(1))
    if (m := _NEW_CAP.search(body)) is not None:
        fields["gpu"] = int(m.group(1))
        put("capacity_bytes", m.group(2))
        put("free_bytes", m.group(3))
    if (m := _NEW_USE.search(body)) is not None:
        put("in_use_bytes", m.group(1))
    if (m := _NEW_ALLOC.search(body)) is not None:
        put("allocated_bytes", m.group(1))
        put("reserved_bytes", m.group(2))
    if (m := _OLD.search(body)) is not None:
        fields["gpu"] = int(m.group(1))
        put("capacity_bytes", m.group(2))
        put("allocated_bytes", m.group(3))
        put("free_bytes", m.group(4))
        put("reserved_bytes", m.group(5))
    if "gpu" not in fields and (m := _DEVICE_GPU.search(body)) is not None:
        fields["gpu"] = int(m.group(1))
    return [make_event("cuda_oom", line, ctx, "error", fields)]


_KILLED = re.compile(r"(?P<memcg>Memory cgroup out of memory|Out of memory(?: \(oom_kill_allocating_task\))?)"
                     r": Killed process (?P<pid>\d+) \((?P<name>[^)]*)\)")
_VM = re.compile(r"total-vm:(\d+)kB, anon-rss:(\d+)kB")
_OOMKILL = re.compile(r"oom-kill:(?P<kv>.*)$")


def host_oom(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    body = line.body
    fields: dict[str, str | int | float] = {}
    m = _KILLED.search(body)
    if m:
        fields.update(pid=int(m.group("pid")), process=m.group("name"),
                      memcg=1 if m.group("memcg").startswith("Memory cgroup") else 0)
        vm = _VM.search(body)
        if vm:
            fields.update(total_vm_kb=int(vm.group(1)), anon_rss_kb=int(vm.group(2)))
    else:
        k = _OOMKILL.search(body)
        if not k:
            return []
        pairs = dict(p.split("=", 1) for p in k.group("kv").split(",") if "=" in p)
        if "pid" in pairs and pairs["pid"].isdigit():
            fields["pid"] = int(pairs["pid"])
        if "task" in pairs:
            fields["process"] = pairs["task"]
        if "constraint" in pairs:
            fields["constraint"] = pairs["constraint"]
            fields["memcg"] = 1 if pairs["constraint"] == "CONSTRAINT_MEMCG" else 0
        cgroup = pairs.get("task_memcg") or pairs.get("oom_memcg")
        if cgroup:
            fields["cgroup"] = cgroup
        fields["summary"] = 1
    return [make_event("host_oom_kill", line, ctx, "fatal", fields, rank=None, rank_source="")]


# The kernel's report of a memory cgroup at its limit, printed with every cgroup OOM kill
# (mm/memcontrol.c, mem_cgroup_print_oom_meminfo): "memory: usage 1048576kB, limit 1048576kB,
# failcnt 123", and "memory+swap: ..." where swap is accounted
_CGROUP_AT_LIMIT = re.compile(r"\b(?P<what>memory(?:\+swap)?): usage (?P<usage>\d+)kB, "
                              r"limit (?P<limit>\d+)kB")


def cgroup_at_limit(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    """A memory cgroup whose usage reached its limit: the OOM killer's own report of the cgroup it
    acted in (no pid on this line; the kill line names it where the paste has it)."""
    m = _CGROUP_AT_LIMIT.search(line.body)
    if m is None or int(m.group("limit")) == 0 or int(m.group("usage")) < int(m.group("limit")):
        return []
    fields: dict[str, str | int | float] = {"memcg": 1, "summary": 1,
                                            "limit_kb": int(m.group("limit"))}
    return [make_event("host_oom_kill", line, ctx, "fatal", fields, rank=None, rank_source="")]


_SRUN_TASK = re.compile(r"srun: error: (?P<host>[\w.\-]+): tasks? (?P<tasks>[\d,\-]+): Out Of Memory")


def srun_oom(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    """SLURM names the OOM-killed task, i.e. the rank: ``srun: error: node07: task 48: Out Of
    Memory`` (``src/srun/.../srun_job.c``; after ``slurmstepd: error: Detected 1 oom_kill event in
    StepId=1234.0. Some of the step tasks have been OOM Killed.``)."""
    m = _SRUN_TASK.search(line.body)
    if m is None:
        return []
    events = []
    for task in _expand(m.group("tasks")):
        fields: dict[str, str | int | float] = {"host": m.group("host"), "summary": 0}
        events.append(make_event("host_oom_kill", line, ctx, "fatal", fields, rank=task,
                                 rank_source="content"))
    return events


def _expand(text: str) -> list[int]:
    found: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        if lo.isdigit():
            found.extend(range(int(lo), int(hi) + 1 if hi.isdigit() else int(lo) + 1))
    return found[:4096]


HANDLERS: list[tuple[bytes, Handler]] = [
    (b": Out Of Memory", srun_oom),
    (b"CUDA out of memory", cuda_oom),
    (b"CUDA error: out of memory", cuda_oom),
    (b"HIP out of memory", cuda_oom),
    (b"hipErrorOutOfMemory", cuda_oom),
    (b"OOM when allocating tensor", cuda_oom),
    (b"failure 'out of memory'", cuda_oom),
    (b"failure 2 'out of memory'", cuda_oom),
    (b"Killed process", host_oom),
    (b"oom-kill:", host_oom),
    (b"kB, limit ", cgroup_at_limit),
]
