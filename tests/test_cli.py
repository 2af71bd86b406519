"""The command line through its real entry point: exit codes, one-line errors, outputs."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from hangscope.cli import main
from hangscope.errors import ExitCode

from frdumps import history, make_dump, make_entry, write_dumps


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hangscope", *args], capture_output=True,
                          text=True, timeout=60)


@pytest.fixture()
def missing_rank_dumps(tmp_path):
    folder = tmp_path / "dumps"
    hung = history(5) + [make_entry(5, seq=6, state="started")]
    write_dumps(str(folder), {0: make_dump(hung, 3), 1: make_dump(history(5), 3),
                              2: make_dump(hung, 3)})
    return folder


class TestAnalyze:
    def test_hang_found_writes_verdict_and_report(self, tmp_path, missing_rank_dumps) -> None:
        out = tmp_path / "out"
        proc = run_cli("analyze", str(missing_rank_dumps), "--out", str(out))
        assert proc.returncode == ExitCode.HANG_FOUND, proc.stderr
        assert "ROOT CAUSE: missing_rank  culprit rank(s) 1" in proc.stdout
        verdict = json.loads((out / "verdict.json").read_text())
        assert verdict["schema"] == "hangscope.verdict/1"
        assert verdict["status"] == "hang"
        assert verdict["findings"][0]["culprit_ranks"] == [1]
        assert verdict["findings"][0]["collective"] == {"pg": "0", "seq": 6, "op": "all_reduce",
                                                        "pg_desc": "default_pg"}
        assert (out / "report.html").read_text().count("missing_rank") >= 1

    def test_json_flag_prints_only_the_verdict(self, tmp_path, missing_rank_dumps) -> None:
        proc = run_cli("analyze", str(missing_rank_dumps), "--out", str(tmp_path / "o"), "--json")
        assert json.loads(proc.stdout)["status"] == "hang"
        assert "Wrote" in proc.stderr

    def test_the_tally_counts_inputs_it_could_not_use(self, tmp_path, missing_rank_dumps) -> None:
        (missing_rank_dumps / "nccl_trace_rank_3").write_bytes(b"\x80\x04truncated")
        proc = run_cli("analyze", str(missing_rank_dumps), "--out", str(tmp_path / "o"))
        assert proc.returncode == ExitCode.HANG_FOUND, proc.stderr
        tally = proc.stdout.strip().splitlines()[-1]
        assert "| 1 input problem (see evidence gaps) |" in tally, tally
        assert "nccl_trace_rank_3: truncated or corrupt pickle" in proc.stdout

    def test_refuses_non_empty_out_without_force(self, tmp_path, missing_rank_dumps) -> None:
        out = tmp_path / "out"
        out.mkdir()
        (out / "keep").write_text("x")
        proc = run_cli("analyze", str(missing_rank_dumps), "--out", str(out))
        assert proc.returncode == ExitCode.BAD_INPUT
        assert proc.stderr.strip().endswith("--out is not empty (pass --force to overwrite)")
        assert main(["analyze", str(missing_rank_dumps), "--out", str(out), "--force"]) == 3

    def test_healthy_exits_zero(self, tmp_path) -> None:
        write_dumps(str(tmp_path / "d"), {r: make_dump(history(4), 2) for r in range(2)})
        assert main(["analyze", str(tmp_path / "d"), "--out", str(tmp_path / "o")]) == 0


@pytest.mark.parametrize("content, expected", [
    (None, "no such file or directory"),
    (b"\x00\x01garbage" * 100, "not a recognised evidence file"),
    (b"\x80\x02}q\x00(X\x07\x00\x00", "truncated or corrupt pickle"),
], ids=["missing", "garbage", "truncated"])
def test_bad_input_is_one_line_without_traceback(tmp_path, content, expected) -> None:
    path = tmp_path / "nccl_trace_rank_0"
    if content is not None:
        path.write_bytes(content)
    proc = run_cli("analyze", str(path), "--out", str(tmp_path / "out"))
    assert proc.returncode == ExitCode.BAD_INPUT
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert str(path) in lines[0] and expected in lines[0]
    assert "Traceback" not in proc.stderr


def test_usage_error_is_exit_2() -> None:
    proc = run_cli("analyze")
    assert proc.returncode == ExitCode.BAD_INPUT
    assert "Missing argument" in proc.stderr


class TestReport:
    def test_rerenders_a_bundle_in_each_format(self, tmp_path, missing_rank_dumps) -> None:
        out = tmp_path / "r.html"
        assert main(["report", str(missing_rank_dumps), "--format", "html", "-o", str(out)]) == 3
        assert "<html" in out.read_text()
        text = run_cli("report", str(missing_rank_dumps), "--format", "text")
        assert "ROOT CAUSE: missing_rank" in text.stdout
        js = run_cli("report", str(missing_rank_dumps), "--format", "json")
        assert json.loads(js.stdout)["findings"][0]["culprit_ranks"] == [1]


def test_two_runs_in_the_same_second_without_out_both_write(tmp_path, monkeypatch,
                                                           missing_rank_dumps) -> None:
    # GIVEN no --out, twice in a row (the clock frozen so that both fall in one second)
    import time as time_module
    dumps = missing_rank_dumps
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(time_module, "strftime", lambda fmt, *a: "hangscope-20261124-120000")
    codes = [main(["analyze", str(dumps), "--quiet"]) for _ in range(2)]
    # THEN both found the hang, each in its own folder
    assert codes == [ExitCode.HANG_FOUND, ExitCode.HANG_FOUND]
    made = sorted(p.name for p in tmp_path.glob("hangscope-*"))
    assert made == ["hangscope-20261124-120000", "hangscope-20261124-120000-2"]
    assert all((tmp_path / name / "verdict.json").exists() for name in made)


def test_report_to_a_terminal_is_text_and_to_a_pipe_html(tmp_path, missing_rank_dumps, capsys,
                                                         monkeypatch) -> None:
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    main(["report", str(missing_rank_dumps)])
    shown = capsys.readouterr().out
    assert "hangscope: HANG" in shown and "<html" not in shown
    monkeypatch.setattr(sys.stdout, "isatty", lambda: False)
    main(["report", str(missing_rank_dumps)])
    assert "<html" in capsys.readouterr().out


def test_one_rank_is_one_rank_in_the_summary(tmp_path, capsys) -> None:
    log = tmp_path / "rank0.log"
    log.write_text("[rank0]: RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    main(["analyze", str(log), "--out", str(tmp_path / "out")])
    shown = capsys.readouterr().out
    assert "evidence from rank 0" in shown and "| 1 rank with evidence" in shown
    assert "1 ranks" not in shown and "world size ?" not in shown


@pytest.mark.parametrize("name", ["notes", "notes.log"])
def test_a_named_text_file_is_read_by_content_whatever_its_name(tmp_path, name) -> None:
    path = tmp_path / name
    path.write_text("hello there\nnothing to see\n")
    code = main(["analyze", str(path), "--out", str(tmp_path / "out"), "--quiet"])
    assert code == ExitCode.INCONCLUSIVE
