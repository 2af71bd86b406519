"""The recorded fixture evidence (fixtures/recorded/*) is complete, safe to load and consistent
with its declared ground truth.  Needs neither torch nor hangscope."""

from __future__ import annotations

import io
import json
import pickle
import re
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
    "config_skew",
}
STATUSES = {"hang", "crashed", "slow", "healthy", "inconclusive"}
OUTCOME_STATUS = {"hang": "hang", "error": "crashed", "slow": "slow", "ok": "healthy"}
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
    assert e["outcome"] in OUTCOME_STATUS
    assert e["status"] in STATUSES
    assert e["status"] == OUTCOME_STATUS[e["outcome"]]
    ranks = set(range(ws))
    for key in ("culprit_ranks", "waiting_ranks", "dump_ranks", "ready_ranks", "stack_ranks"):
        assert isinstance(e[key], list) and set(e[key]) <= ranks, key
    if e["status"] == "healthy":  # nothing is wrong: no finding at all
        assert e["kind"] is None
        assert e["culprit_ranks"] == [] and e["waiting_ranks"] == []
    else:
        assert e["kind"] in KINDS
        assert e["culprit_ranks"], "a fixture that goes wrong always has a culprit"
    assert not set(e["culprit_ranks"]) & set(e["waiting_ranks"])
    assert isinstance(e["fr_has_evidence"], bool)
    assert isinstance(e["notes"], str) and e["notes"]
    assert isinstance(e["facts"], dict)
    assert isinstance(e["worker_stacks"], dict)
    for r, n in e["worker_stacks"].items():
        assert int(r) in e["stack_ranks"] and isinstance(n, int) and n > 0
    c = e["collective"]
    if c is not None:
        assert set(c) == {"pg", "seq", "op"}
        assert isinstance(c["pg"], str) and isinstance(c["op"], str)
        assert isinstance(c["seq"], int) and c["seq"] > 1
    assert set(e["blocked_in"]) == {str(r) for r in ranks}
    for where in e["blocked_in"].values():
        assert ("pg" in where) != ("python" in where)
        if "died" in where:  # where the main thread (or the process) died, and how
            assert isinstance(where["python"], str) and isinstance(where["died"], str)
        if "running" in where:
            assert where["running"] is True and e["outcome"] in {"slow", "ok"}
    if not e["fr_has_evidence"]:
        assert c is None


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_dumps_and_logs_present(scenario: str) -> None:
    e = expected(scenario)
    d = RECORDED / scenario
    want = dump_ranks(scenario)
    pickles = sorted(int(p.name.rsplit("_", 1)[1]) for p in (d / "fr").glob("pickle/*"))
    jsons = sorted(int(p.stem.rsplit("_", 1)[1]) for p in (d / "fr").glob("json/*"))
    assert pickles == want
    assert jsons == want
    for r in range(e["world_size"]):
        for stream in ("stdout", "stderr"):
            assert (d / "logs" / f"rank{r}.{stream}.log").is_file()
    if e.get("launcher_log", True):
        assert (d / "logs" / "torchrun.log").stat().st_size > 0
    else:  # recorded as if the launcher's console was lost: only the ranks' own logs
        assert not (d / "logs" / "torchrun.log").exists()
    total = sum(p.stat().st_size for p in d.rglob("*") if p.is_file())
    assert total < 200_000, f"{scenario} recording is {total} bytes: keep committed files small"


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_no_temp_paths_leak(scenario: str) -> None:
    for p in (RECORDED / scenario).rglob("*"):
        if p.is_file() and p.parent.name != "pickle":
            text = p.read_text(errors="replace")
            assert "hangscope-rec-" not in text and "/tmp/" not in text, p


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
        elif not where.get("running"):  # blocked outside any recorded collective
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


# --- py-spy stacks (jobs that stay up: outcome hang or slow) -----------------------------------

STACKED = [s for s in SCENARIOS if expected(s)["stack_ranks"]]
NEEDS_STACKS = {  # recordings made since the recorder takes stacks
    "rank_died",
    "dataloader_stall",
    "python_deadlock",
    "straggler",
    "init_hang",
}


def stacks(scenario: str, name: str) -> list[dict[str, Any]]:
    threads = json.loads((RECORDED / scenario / "stacks" / f"{name}.json").read_text())
    assert isinstance(threads, list) and threads
    return threads


def main_thread(threads: list[dict[str, Any]]) -> list[str]:
    """The main thread's function names, innermost first, without class prefixes."""
    (main,) = [t for t in threads if t["thread_name"] == "MainThread"]
    return [f["name"].rsplit(".", 1)[-1] for f in main["frames"]]


def test_new_hung_recordings_have_stacks() -> None:
    for scenario in NEEDS_STACKS:
        e = expected(scenario)
        assert e["outcome"] in {"hang", "slow"}
        assert e["stack_ranks"] == list(range(e["world_size"])), scenario
    for scenario in SCENARIOS:
        if expected(scenario)["outcome"] in {"error", "ok"}:
            assert not (RECORDED / scenario / "stacks").exists(), scenario


@pytest.mark.parametrize("scenario", STACKED)
def test_stacks_well_formed(scenario: str) -> None:
    e = expected(scenario)
    d = RECORDED / scenario / "stacks"
    names = [f"rank{r}" for r in e["stack_ranks"]]
    names += [f"rank{r}.worker{k}" for r, n in e["worker_stacks"].items() for k in range(int(n))]
    assert sorted(p.name for p in d.iterdir()) == sorted(
        [f"{n}.{ext}" for n in names for ext in ("json", "txt")] + ["source-lines.json"]
    )
    for n in names:
        threads = stacks(scenario, n)
        pid = threads[0]["pid"]
        for t in threads:
            assert t["pid"] == pid and isinstance(t["frames"], list)
            for f in t["frames"]:
                assert isinstance(f["name"], str) and isinstance(f["line"], int)
        text = (d / f"{n}.txt").read_text()
        assert text.startswith(f"Process {pid}: "), n
        assert sum(line.startswith("Thread ") for line in text.splitlines()) == len(threads)
        if "." not in n:  # a rank: the same process that logged "started pid=..."
            log = (RECORDED / scenario / "logs" / f"{n}.stdout.log").read_text()
            if "started pid=" in log:  # (init_hang's ranks never got that far)
                assert f"started pid={pid} " in log, n


@pytest.mark.parametrize("scenario", STACKED)
def test_stacks_match_ground_truth(scenario: str) -> None:
    e = expected(scenario)
    for r in e["stack_ranks"]:
        where = e["blocked_in"][str(r)]
        threads = stacks(scenario, f"rank{r}")
        names = main_thread(threads)
        if "died" in where:  # the main thread raised; the interpreter waits for other threads
            assert names == ["_shutdown"], (r, names)
        elif "pg" in where:
            assert names[0] == where["op"], (r, names)
        else:
            assert where["python"] in names, (r, names)
        if "other_thread" in where:
            others = {f["name"].rsplit(".", 1)[-1] for t in threads for f in t["frames"]}
            assert where["other_thread"] in others
        if "worker" in where:
            n = e["worker_stacks"][str(r)]
            workers = [main_thread(stacks(scenario, f"rank{r}.worker{k}")) for k in range(n)]
            # the worker blocks in the dataset code named (the frames below it vary with the
            # moment: a lock's __enter__, a pipe's _recv)
            name = where["worker"].rsplit(".", 1)[-1]
            assert any(name in w[:8] for w in workers), workers


# --- what the logs say ------------------------------------------------------------------------


def log(scenario: str, name: str) -> str:
    return (RECORDED / scenario / "logs" / name).read_text(errors="replace")


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_logs_match_outcome(scenario: str) -> None:
    e = expected(scenario)
    launcher = log(scenario, "torchrun.log") if e.get("launcher_log", True) else None
    if launcher is None:
        pass
    elif e["outcome"] == "error":
        assert "ChildFailedError" in launcher
    else:  # killed by the recorder (hang, slow) or a clean exit (ok): no failure report
        assert "ChildFailedError" not in launcher
    for r, where in e["blocked_in"].items():
        died = where.get("died")
        if died == "SIGKILL":
            if launcher is not None:
                assert "exitcode  : -9" in launcher and "Signal 9 (SIGKILL)" in launcher
            assert "Traceback" not in log(scenario, f"rank{r}.stderr.log")
        elif died:
            err = log(scenario, f"rank{r}.stderr.log")
            assert f"{died}: " in err and f"in {where['python']}" in err, r
    if "final_loss" in e["facts"]:
        assert f"final loss {e['facts']['final_loss']}\n" in log(scenario, "rank0.stdout.log")
    if e["outcome"] == "slow":  # every rank kept stepping
        for r in range(e["world_size"]):
            steps = [
                int(n) for n in re.findall(r"step (\d+) ", log(scenario, f"rank{r}.stdout.log"))
            ]
            assert len(steps) >= 3 and steps == sorted(steps), r
