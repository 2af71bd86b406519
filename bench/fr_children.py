"""What the benchmark's child processes run (``bench_fr.py _load_only DIR`` and ``_split DIR OUT``):
the floor, and one ``--jobs 1`` analysis with a CPU-time counter around each stage."""

from __future__ import annotations

import json
import os
import pickle
import time

from fr_gen import PREFIX


def load_only(d: str) -> int:
    """The floor: read every dump, unpickle it the fastest way Python can, drop it."""
    n_files = n_entries = 0
    for name in sorted(os.listdir(d)):
        if not name.startswith(PREFIX):
            continue
        with open(os.path.join(d, name), "rb") as f:
            data = f.read()
        if name.endswith(".json"):
            obj = json.loads(data)
        else:
            # the fastest way Python reads a pickle. (Until issue 21's third step this was
            # _NoGlobals(io.BytesIO(data)).load(): on a stream without peek() the C unpickler
            # calls read() once per opcode, which made this floor 2-4x too slow.)
            obj = pickle.loads(data)
        n_entries += len(obj.get("entries", ()))
        n_files += 1
        del obj, data
    print(f"load-only: {n_files} files, {n_entries} entries")
    return 0


# (label, module, attribute): CPU seconds spent inside, one --jobs 1 run in one process
_SPLIT = (
    ("reading", "hangscope.sources.flight_recorder", "_read_bounded"),
    ("unpickle", "hangscope.sources.flight_recorder", "_decode"),
    ("reduce", "hangscope.sources.fr_reduce", "Reducer.digest"),
    ("load total", "hangscope.sources.load", "load_paths"),
    ("analysis", "hangscope.pipeline", "analyze_evidence"),
    ("render (verdict, html)", "hangscope.pipeline", "write_outputs"),
    ("total", "hangscope.pipeline", "analyze_paths"),
)


def split(d: str, out: str) -> int:
    """Run `hangscope analyze d --jobs 1` in this process with a CPU-time counter around each
    stage (no profiler: the counters cost microseconds per dump) and print where the time went.
    "hydrate" is the parent's share of loading (load total less reading, unpickling and
    reducing); "match" the analysis less the dumps it reads again for the report."""
    import importlib

    from hangscope.cli import main as hs_main

    got = {label: 0.0 for label, _m, _a in _SPLIT}
    depth = {label: 0 for label, _m, _a in _SPLIT}

    def timed(label, fn):
        def wrapper(*args, **kwargs):
            if depth[label]:
                return fn(*args, **kwargs)
            depth[label] += 1
            start = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                got[label] += time.process_time() - start
                depth[label] -= 1
        return wrapper

    for label, module, attr in _SPLIT:
        owner = importlib.import_module(module)
        *path, name = attr.split(".")
        for part in path:
            owner = getattr(owner, part)
        setattr(owner, name, timed(label, getattr(owner, name)))
    from hangscope.sources import load

    loaded = {}
    load_paths = load.load_paths

    def snapshot(*args, **kwargs):
        try:
            return load_paths(*args, **kwargs)
        finally:
            loaded.update(got)

    load.load_paths = snapshot
    try:
        hs_main(["analyze", d, "--out", out, "--json", "--jobs", "1"])
    except SystemExit:
        pass
    again = sum(got[k] - loaded.get(k, 0.0) for k in ("reading", "unpickle", "reduce"))
    got = {k: loaded.get(k, v) if k in ("reading", "unpickle", "reduce") else v
           for k, v in got.items()}
    got["hydrate"] = got["load total"] - got["reading"] - got["unpickle"] - got["reduce"]
    got["match (analysis)"] = got.pop("analysis") - got["render (verdict, html)"] - again
    got["read again for the report"] = again
    print("SPLIT " + json.dumps(got))
    return 0
