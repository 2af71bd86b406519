"""Factories for synthetic flight-recorder dumps in torch's exact dict shape (for unit tests).

Real recorded dumps live in fixtures/; these build the small, precise cases a unit test needs.
"""

from __future__ import annotations

import json
import os
import pickle
from typing import Any

FRAMES = [
    {"name": "all_reduce", "line": 3245,
     "filename": "/usr/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"},
    {"name": "train_step", "filename": "/job/train.py", "line": 42},
]


def make_entry(record_id: int, op: str = "all_reduce", seq: int | None = None, *,
               sizes: list[list[int]] | None = None, dtype: str = "Float",
               state: str = "completed", pg: tuple[str, str] = ("0", "default_pg"),
               backend: str = "nccl", p2p_seq: int = 0, peer: str = "",
               retired: bool | None = None) -> dict[str, Any]:
    sizes = sizes if sizes is not None else [[4, 4]]
    is_p2p = op in ("send", "recv")
    name = f"{backend}:{op}" + (f" {peer}" if peer else "")
    return {
        "record_id": record_id, "pg_id": int(pg[0]) if pg[0].isdigit() else 0,
        "process_group": pg, "collective_seq_id": 0 if is_p2p else (seq or record_id + 1),
        "p2p_seq_id": p2p_seq, "op_id": record_id + 1, "profiling_name": name,
        "time_created_ns": 1_700_000_000_000_000_000 + record_id * 1000,
        "duration_ms": 1.0 if state == "completed" else None,
        "input_sizes": sizes, "input_dtypes": [dtype] * len(sizes),
        "output_sizes": sizes, "output_dtypes": [dtype] * len(sizes),
        "state": state, "time_discovered_started_ns": None,
        "time_discovered_completed_ns": None,
        "retired": (state == "completed") if retired is None else retired,
        "timeout_ms": 600000, "is_p2p": is_p2p, "frames": FRAMES,
        "thread_id": "1", "thread_name": "pt_main_thread",
    }


def make_dump(entries: list[dict[str, Any]], world: int,
              groups: dict[str, tuple[str, list[int]]] | None = None) -> dict[str, Any]:
    groups = groups or {"0": ("default_pg", list(range(world)))}
    return {
        "version": "2.10",
        "pg_config": {name: {"name": name, "desc": desc, "ranks": str(ranks)}
                      for name, (desc, ranks) in groups.items()},
        "pg_status": {},
        "comm_lib_version": "2.21.5",
        "entries": entries,
    }


def write_dumps(folder: str, dumps: dict[int, dict[str, Any]], fmt: str = "pickle",
                prefix: str = "nccl_trace_rank_") -> list[str]:
    os.makedirs(folder, exist_ok=True)
    paths = []
    for rank, dump in dumps.items():
        path = os.path.join(folder, f"{prefix}{rank}" + (".json" if fmt == "json" else ""))
        if fmt == "json":
            with open(path, "w") as handle:
                json.dump(dump, handle)
        else:
            with open(path, "wb") as handle:
                pickle.dump(dump, handle, protocol=2)
        paths.append(path)
    return paths


def history(n: int, pg: tuple[str, str] = ("0", "default_pg"), start_record: int = 0,
            backend: str = "nccl") -> list[dict[str, Any]]:
    """n completed all_reduces, seq 1..n."""
    return [make_entry(start_record + i, seq=i + 1, pg=pg, backend=backend) for i in range(n)]
