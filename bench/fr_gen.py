"""The benchmark's dumps, written once and cached under ``--work``: fixtures/synth_fr.py's tp x dp
layout in a given FR version, writer and form, or one of fixtures/fr_shapes.py's shapes."""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

PREFIX = "nccl_trace_rank_"


def ensure_dumps(work: Path, n: int, entries: int, version: str,
                 writer: str = "c10", fmt: str = "pickle",
                 timing: bool = True, shape: str | None = None) -> tuple[Path, dict, dict]:
    """The dumps of one row, written once (cached under work): with ``shape``, one of
    fixtures/fr_shapes.py's SHAPES; else the tp x dp layout in the given version and form."""
    from fixtures import fr_shapes, synth_fr

    if shape is not None:
        d = work / f"fr_{shape}_{n}x{entries}_{writer}"
    else:
        d = work / (f"fr_{n}x{entries}_v{version}_{writer}" + ("_json" if fmt == "json" else "")
                    + ("" if timing else "_untimed"))
    truth_p = d / "expected.json"
    info = {"generated": False, "gen_s": None}
    if truth_p.exists() and len(list(d.glob(PREFIX + "*"))) == n:
        truth = json.loads(truth_p.read_text())
    else:
        if d.exists():
            shutil.rmtree(d)
        t0 = time.monotonic()
        if shape is not None:
            truth = fr_shapes.write(d, shape, n, entries, writer)
        else:
            truth = synth_fr.write_large(d, n, entries, version, fmt, progress=n >= 1024,
                                          writer=writer, timing=timing)
        info = {"generated": True, "gen_s": time.monotonic() - t0}
    info["bytes"] = sum(p.stat().st_size for p in d.glob(PREFIX + "*"))
    return d, truth, info
