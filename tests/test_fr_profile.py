"""``hangscope analyze --profile``: where one run's time went, printed after the verdict, without
changing the verdict; worker processes' phases summed from what the pool sends back."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path

import pytest

from hangscope import timing
from hangscope.cli import main
from hangscope.sources import fr_stream
from hangscope.sources.logs import pool as log_pool

from fixtures import fr_shapes

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "fixtures" / "nccl" / "missing_rank"
ROW = re.compile(r"^  (\w+) +(-?\d+\.\d+) +(-?\d+\.\d+)(?: +(-?\d+\.\d+) +(-?\d+\.\d+))?")


def _rows(err: str) -> dict[str, list[float]]:
    return {m.group(1): [float(v) for v in m.groups()[1:] if v is not None]
            for line in err.splitlines() if (m := ROW.match(line))}


def _verdict(out: Path) -> dict[str, object]:
    verdict = json.loads((out / "verdict.json").read_text())
    verdict.pop("tool_version", None)
    return verdict


class TestAnalyzeProfile:
    def test_every_phase_is_printed_and_the_verdict_does_not_change(
            self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        # GIVEN a folder of NCCL flight-recorder dumps, analyzed once without --profile
        plain = main(["analyze", str(FIXTURE), "--out", str(tmp_path / "plain"), "--json"])
        plain_out = capsys.readouterr().out
        # WHEN it is analyzed again with --profile
        code = main(["analyze", str(FIXTURE), "--out", str(tmp_path / "prof"), "--json",
                     "--profile"])
        captured = capsys.readouterr()
        # THEN the verdict, its exit code and what stdout says are the same
        assert code == plain == 3
        assert _verdict(tmp_path / "prof") == _verdict(tmp_path / "plain")
        assert json.loads(captured.out)["findings"] == json.loads(plain_out)["findings"]
        # AND stderr holds, after the tally, one row per phase, "other" and "total"
        assert "profile of this run" in captured.err
        assert captured.err.index("ranks with evidence") < captured.err.index("profile of")
        rows = _rows(captured.err)
        assert set(timing.PHASE_NAMES) | {"other", "total"} <= set(rows), rows
        assert all(value >= 0 for values in rows.values() for value in values), rows
        # AND the dumps were read, unpickled and reduced, and the report rendered, in time > 0
        for name in ("unpickle", "reduce", "render"):
            assert rows[name][1] > 0, (name, rows)
        assert sum(rows[name][0] for name in (*timing.PHASE_NAMES, "other")) == \
            pytest.approx(rows["total"][0], abs=0.01)

    def test_workers_phases_are_summed(self, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
        # GIVEN 3D-parallel dumps with sends and receives, read by a pool of two workers
        assert threading.active_count() == 1  # else the pool is not used
        truth = fr_shapes.write(tmp_path / "dumps", "3d", 32, 150)
        monkeypatch.setattr(fr_stream, "STREAM_FROM", 0)
        monkeypatch.setattr(fr_stream, "POOL_FROM", 0)
        # WHEN analyzed with --profile
        code = main(["analyze", str(tmp_path / "dumps"), "--out", str(tmp_path / "out"),
                     "--jobs", "2", "--profile", "-q"])
        err = capsys.readouterr().err
        # THEN the culprit is found, and the workers' columns say they read all 32 dumps
        assert code == 3
        assert _verdict(tmp_path / "out")["findings"][0]["culprit_ranks"] == \
            truth["culprit_ranks"]
        assert "(32 files read by workers)" in err
        rows = _rows(err)
        assert all(len(rows[name]) == 4 for name in timing.PHASE_NAMES), rows
        assert rows["unpickle"][3] > 0 and rows["reduce"][3] > 0, rows
        assert rows["hydrate"][1] > 0, rows

    @pytest.mark.parametrize("jobs", [1, 2])
    def test_log_scanning_is_its_own_phase(self, tmp_path: Path, jobs: int,
                                           capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
        # GIVEN four rank logs of training lines, rank 2's ending in a CUDA OOM and the others'
        # in watchdog timeouts (read by two workers when --jobs 2)
        assert threading.active_count() == 1  # else the pool is not used
        monkeypatch.setattr(log_pool, "POOL_FROM_BYTES", 0)
        logs = tmp_path / "logs"
        logs.mkdir()
        for rank in range(4):
            lines = [f"[rank{rank}] step {step} loss {1.0 / step:.4f} lr 3e-4"
                     for step in range(1, 3000)]
            lines += (["Traceback (most recent call last):",
                       '  File "/workspace/train.py", line 190, in main',
                       "    loss.backward()",
                       "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."]
                      if rank == 2 else
                      [f"[rank{rank}]:[E102 16:12:33.000000000 ProcessGroupNCCL.cpp:632] [Rank "
                       f"{rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=91, "
                       "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for "
                       "600093 milliseconds before timing out."])
            (logs / f"rank{rank}.log").write_text("\n".join(lines) + "\n")
        # WHEN analyzed with --profile
        code = main(["analyze", str(logs), "--out", str(tmp_path / "out"), "--jobs", str(jobs),
                     "--profile", "-q"])
        err = capsys.readouterr().err
        # THEN the OOM is read, and the time spent scanning the logs is its own row: in this
        # process at --jobs 1, summed over the workers at --jobs 2 (who read all four)
        assert code == 3
        finding = _verdict(tmp_path / "out")["findings"][0]
        assert (finding["kind"], finding["culprit_ranks"]) == ("rank_oom", [2])
        rows = _rows(err)
        if jobs == 1:
            assert rows["logs"][1] > 0, rows
        else:
            assert "(4 files read by workers)" in err
            assert rows["logs"][3] > 0 and rows["logs"][1] == 0, rows
        assert sum(rows[name][0] for name in (*timing.PHASE_NAMES, "other")) == \
            pytest.approx(rows["total"][0], abs=0.01)

    def test_phases_are_exclusive(self) -> None:
        # GIVEN a phase opened inside another
        with timing.profiling() as profile:
            with timing.phase("reduce"):
                with timing.phase("read"):
                    sum(range(200_000))
        # THEN the inner phase's time is not counted in the outer one too
        assert profile.wall["read"] > 0 and profile.wall["reduce"] >= 0
        assert profile.wall["read"] + profile.wall["reduce"] <= profile.total_wall + 1e-6
        # AND outside profiling() a phase is a no-op that records nothing
        with timing.phase("read"):
            pass
        assert timing.current() is None
