"""The recorded fixture evidence (fixtures/recorded/*) is complete, safe to load and consistent
with its declared ground truth.  Needs neither torch nor hangscope."""

from __future__ import annotations

import io
import json
import pickle
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
RECORDED = ROOT / "fixtures" / "recorded"
JOBS = ROOT / "fixtures" / "jobs"
SCENARIOS = sorted(p.name for p in RECORDED.iterdir() if (p / "expected.json").is_file())

KINDS = {
    "collective_mismatch",
    "size_mismatch",
    "missing_rank",
    "rank_died",
    "rank_oom",
    "dataloader_stall",
    "python_deadlock",
    "p2p_deadlock",
    "pg_order_deadlock",
    "straggler",
    "network_fault",
    "init_hang",
}
SCALARS = (str, int, float, bool, type(None))


class NoGlobals(pickle.Unpickler):
    """Refuses every global: only builtin containers and scalars can come out."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"global {module}.{name} refused")


def load_pickle(path: Path) -> Any:
    return NoGlobals(io.BytesIO(path.read_bytes())).load()


def only_builtins(obj: Any) -> bool:
    if isinstance(obj, SCALARS):
        return True
    if isinstance(obj, dict):
        return all(isinstance(k, SCALARS) and only_builtins(v) for k, v in obj.items())
    if isinstance(obj, (list, tuple)):
        return all(only_builtins(v) for v in obj)
    return False


def expected(scenario: str) -> dict[str, Any]:
    return json.loads((RECORDED / scenario / "expected.json").read_text())


def dump_ranks(scenario: str) -> list[int]:
    return sorted(expected(scenario)["dump_ranks"])


def test_every_job_is_recorded() -> None:
    jobs = sorted(p.stem for p in JOBS.glob("*.py") if not p.name.startswith("_"))
    assert jobs, "no fixture jobs found"
    assert jobs == SCENARIOS


def test_no_globals_unpickler_refuses_globals() -> None:
    evil = pickle.dumps(Path("/etc/passwd"))
    with pytest.raises(pickle.UnpicklingError, match="refused"):
        load_pickle_bytes(evil)


def load_pickle_bytes(data: bytes) -> Any:
    return NoGlobals(io.BytesIO(data)).load()


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_expected_json_well_formed(scenario: str) -> None:
    e = expected(scenario)
    assert e["scenario"] == scenario
    ws = e["world_size"]
    assert isinstance(ws, int) and 2 <= ws <= 4
    assert e["kind"] in KINDS
    ranks = set(range(ws))
    for key in ("culprit_ranks", "waiting_ranks", "dump_ranks"):
        assert isinstance(e[key], list) and set(e[key]) <= ranks, key
    assert e["culprit_ranks"], "a fixture always has a culprit"
    assert not set(e["culprit_ranks"]) & set(e["waiting_ranks"])
    assert e["outcome"] in {"hang", "error"}
    assert isinstance(e["fr_has_evidence"], bool)
    assert isinstance(e["notes"], str) and e["notes"]
    c = e["collective"]
    if c is not None:
        assert set(c) == {"pg", "seq", "op"}
        assert isinstance(c["pg"], str) and isinstance(c["op"], str)
        assert isinstance(c["seq"], int) and c["seq"] > 1
    assert set(e["blocked_in"]) == {str(r) for r in ranks}
    for where in e["blocked_in"].values():
        assert ("pg" in where) != ("python" in where)
    if not e["fr_has_evidence"]:
        assert c is None


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_dumps_and_logs_present(scenario: str) -> None:
    e = expected(scenario)
    d = RECORDED / scenario
    want = dump_ranks(scenario)
    pickles = sorted(int(p.name.rsplit("_", 1)[1]) for p in (d / "fr" / "pickle").iterdir())
    jsons = sorted(int(p.stem.rsplit("_", 1)[1]) for p in (d / "fr" / "json").iterdir())
    assert pickles == want
    assert jsons == want
    for r in range(e["world_size"]):
        for stream in ("stdout", "stderr"):
            assert (d / "logs" / f"rank{r}.{stream}.log").is_file()
    assert (d / "logs" / "torchrun.log").stat().st_size > 0
    total = sum(p.stat().st_size for p in d.rglob("*") if p.is_file())
    assert total < 200_000, f"{scenario} recording is {total} bytes: keep committed files small"


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_pickle_dumps_are_builtin_only(scenario: str) -> None:
    for r in dump_ranks(scenario):
        path = RECORDED / scenario / "fr" / "pickle" / f"nccl_trace_rank_{r}"
        data = load_pickle(path)
        assert only_builtins(data), path
        assert isinstance(data, dict)
        assert {"version", "pg_config", "pg_status", "entries"} <= set(data)
        assert data["entries"], path
        for entry in data["entries"]:
            assert isinstance(entry["collective_seq_id"], int)
            assert isinstance(entry["process_group"], tuple) and len(entry["process_group"]) == 2
            assert entry["profiling_name"].startswith("gloo:")
            assert isinstance(entry["frames"], list)
        js = json.loads(
            (RECORDED / scenario / "fr" / "json" / f"nccl_trace_rank_{r}.json").read_text()
        )
        assert len(js["entries"]) == len(data["entries"])
        assert js["version"] == data["version"]


def _entry(entries: list[dict[str, Any]], pg: str, seq: int) -> dict[str, Any] | None:
    found = [x for x in entries if x["process_group"][0] == pg and x["collective_seq_id"] == seq]
    return found[-1] if found else None


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_ground_truth_matches_dumps(scenario: str) -> None:
    e = expected(scenario)
    dumped = set(dump_ranks(scenario))
    for rank_s, where in e["blocked_in"].items():
        r = int(rank_s)
        if r not in dumped:
            continue
        entries = load_pickle(RECORDED / scenario / "fr" / "pickle" / f"nccl_trace_rank_{r}")[
            "entries"
        ]
        pending = [x for x in entries if not x["retired"]]
        if "pg" in where:
            x = _entry(entries, where["pg"], where["seq"])
            assert x is not None, (r, where)
            assert x["profiling_name"] == "gloo:" + where["op"]
            if e["outcome"] == "hang":
                assert not x["retired"] and pending == [x], (r, where)
        else:  # blocked outside any recorded collective
            assert pending == [], (r, where)
    c = e["collective"]
    if c is not None:  # some rank's dump holds the finding's collective
        ops = set()
        for r in dumped:
            p = RECORDED / scenario / "fr" / "pickle" / f"nccl_trace_rank_{r}"
            x = _entry(load_pickle(p)["entries"], c["pg"], c["seq"])
            if x is not None:
                ops.add(x["profiling_name"])
        assert "gloo:" + c["op"] in ops
    if not e["fr_has_evidence"]:
        for r in dumped:
            p = RECORDED / scenario / "fr" / "pickle" / f"nccl_trace_rank_{r}"
            assert not any(x["is_p2p"] for x in load_pickle(p)["entries"])
