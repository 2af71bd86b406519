"""Where a collection ran and which job it saw, for the bundle's manifest: host, the scheduler's
node name, the job id, the nodes the job was given and this node's place among them.

Read from the ranks' own environment (``/proc/PID/environ``, already filtered by discovery), so
it is right also when hangscope itself runs outside the job (an ssh session, a cron job)::

    node       SLURMD_NODENAME (set by slurmd in every task), else SLURM_NODENAME, NODE_NAME or
               KUBERNETES_NODE_NAME (from the ranks, else from our own environment), else the
               host name
    job_id     SLURM_JOB_ID, else TORCHELASTIC_RUN_ID
    nodes      SLURM_JOB_NODELIST (or SLURM_NODELIST), expanded: ``n[1-3,7],gpu5``
    node_index SLURM_NODEID; group_rank GROUP_RANK (torchrun's node rank);
               local_world_size LOCAL_WORLD_SIZE; group_world_size GROUP_WORLD_SIZE

Values the ranks disagree on are not guessed between: the field is left out and a note says so.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Iterable, Mapping
from typing import Any

from hangscope.discover import JobProcesses
from hangscope.discover.environ import env_int

NODE_VARS = ("SLURMD_NODENAME", "SLURM_NODENAME", "NODE_NAME", "KUBERNETES_NODE_NAME")
JOB_ID_VARS = ("SLURM_JOB_ID", "TORCHELASTIC_RUN_ID")
NODELIST_VARS = ("SLURM_JOB_NODELIST", "SLURM_NODELIST")
MAX_NODES = 100_000
# torchrun sets TORCHELASTIC_RUN_ID=none without --rdzv-id: no id at all
PLACEHOLDERS = frozenset({"none", "None", ""})
MAX_NAME = 256  # characters of a node name kept
_BRACKET = re.compile(r"\[([^\[\]]*)\]")


def describe(job: JobProcesses, own_env: Mapping[str, str] | None = None
             ) -> tuple[dict[str, Any], list[str]]:
    """Manifest fields (host, node, job_id, expected_nodes, node_index, group_rank,
    local_world_size, group_world_size) and notes about what could not be told."""
    own = os.environ if own_env is None else own_env
    envs = [r.env for r in job.ranks]
    notes: list[str] = []
    host = job.host or socket.gethostname()
    fields: dict[str, Any] = {"host": host}
    node = _first_agreed(envs, NODE_VARS, notes, "node name") or _first_of(own, NODE_VARS)
    fields["node"] = (node or host)[:MAX_NAME]
    job_id = _first_agreed(envs, JOB_ID_VARS, notes, "job id")
    if job_id:
        fields["job_id"] = job_id
    nodelist = _first_agreed(envs, NODELIST_VARS, notes, "node list")
    if nodelist:
        try:
            fields["expected_nodes"] = expand_hostlist(nodelist)
        except ValueError as exc:
            notes.append(f"cannot read the job's node list {nodelist!r}: {exc}")
    for key, var in (("node_index", "SLURM_NODEID"), ("group_rank", "GROUP_RANK"),
                     ("local_world_size", "LOCAL_WORLD_SIZE"),
                     ("group_world_size", "GROUP_WORLD_SIZE")):
        values = {env_int(env.get(var)) for env in envs} - {None}
        if len(values) == 1:
            fields[key] = values.pop()
    sizes = {r.local_world_size for r in job.ranks if r.local_world_size}
    if "local_world_size" not in fields and len(sizes) == 1:
        fields["local_world_size"] = sizes.pop()
    return fields, notes


def _first_agreed(envs: Iterable[Mapping[str, str]], names: tuple[str, ...], notes: list[str],
                  what: str) -> str | None:
    """The first variable of ``names`` any rank sets, when every rank that sets it agrees."""
    envs = list(envs)
    for name in names:
        values = sorted({env[name] for env in envs
                         if env.get(name) and env[name] not in PLACEHOLDERS})
        if len(values) == 1:
            return values[0]
        if values:
            notes.append(f"the ranks disagree on their {what} ({name}: {', '.join(values[:4])}"
                         f"{', ...' if len(values) > 4 else ''}): more than one job matched?")
            return None
    return None


def _first_of(env: Mapping[str, str], names: tuple[str, ...]) -> str | None:
    return next((env[name] for name in names if env.get(name)), None)


def expand_hostlist(text: str) -> list[str]:
    """SLURM's compressed host list (``n[1-3,07],gpu5``, ``a[1-2]-b[1-2]``) as names, in order.

    Raises ValueError for unbalanced brackets, bad ranges or more than MAX_NODES names."""
    names: list[str] = []
    for item in _split_top(text.strip()):
        if item:
            names.extend(_expand_item(item))
        if len(names) > MAX_NODES:
            raise ValueError(f"more than {MAX_NODES} nodes")
    return names


def _split_top(text: str) -> list[str]:
    items, depth, start = [], 0, 0
    for index, char in enumerate(text):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise ValueError("unbalanced ']'")
        elif char == "," and depth == 0:
            items.append(text[start:index])
            start = index + 1
    if depth:
        raise ValueError("unbalanced '['")
    items.append(text[start:])
    return items


def _expand_item(item: str) -> list[str]:
    match = _BRACKET.search(item)
    if match is None:
        if "[" in item or "]" in item:
            raise ValueError(f"bad host list item {item!r}")
        return [item]
    head, tail = item[:match.start()], item[match.end():]
    out: list[str] = []
    for part in match.group(1).split(","):
        low, dash, high = part.partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            raise ValueError(f"bad range {part!r} in {item!r}")
        width = len(low)
        first, last = int(low), int(high) if dash else int(low)
        if last < first or last - first > MAX_NODES:
            raise ValueError(f"bad range {part!r} in {item!r}")
        for number in range(first, last + 1):
            out.extend(head + str(number).zfill(width) + rest for rest in _expand_item(tail))
    return out
