"""The forked analyzer behind ``attach``: same outputs as analyzing in-process, and every way
the child can fail ends in the parent's hands (fallback, one-line error, internal error).

These run in pytest's own process, as the live attach tests do: it has one thread here, so
``AnalyzerProcess.start`` forks; a test that needs the fork says so when it cannot."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from hangscope import pipeline
from hangscope.analyzer_process import (
    AnalyzerProcess,
    Answer,
    ChildCrash,
    ChildError,
)
from hangscope.errors import BadInputError, ExitCode
from hangscope.options import LoadOptions, OutputOptions

RECORDED = Path(__file__).resolve().parent.parent / "fixtures" / "recorded" / "missing_rank"


_JOBS = (lambda: pipeline.prepare_analysis(write_html=True), pipeline.analyze_answer)


def _start() -> AnalyzerProcess:
    analyzer = AnalyzerProcess.start(*_JOBS)
    assert analyzer is not None, f"no fork: {threading.active_count()} threads in this process"
    return analyzer


def _finish(analyzer: AnalyzerProcess, evidence: Path, out: Path) -> Answer | None:
    out.mkdir(parents=True, exist_ok=True)
    return analyzer.finish(str(evidence), str(out), LoadOptions(), OutputOptions())


def _gone(pid: int) -> bool:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


def test_forked_analysis_writes_what_in_process_analysis_writes(tmp_path) -> None:
    # GIVEN recorded evidence, WHEN the child analyzes it and this process analyzes it too
    analyzer = _start()
    pid = analyzer.pid
    answer = _finish(analyzer, RECORDED, tmp_path / "forked")
    here = pipeline.analyze_paths([str(RECORDED)], LoadOptions(), OutputOptions(),
                                  str(tmp_path / "here"))
    # THEN the verdict, the files and their bytes are the same, and the child is reaped
    assert answer is not None
    assert answer.verdict.to_json() == here.verdict.to_json()
    assert [Path(f).name for f in answer.files] == ["verdict.json", "report.html"]
    for name in ("verdict.json", "report.html"):
        assert (tmp_path / "forked" / name).read_bytes() == (tmp_path / "here" / name).read_bytes()
    assert answer.input_problems == here.summary().input_problems
    assert _gone(pid)


def test_a_child_that_dies_leaves_the_analysis_to_the_parent(tmp_path, monkeypatch) -> None:
    parent = os.getpid()

    def die(*args: object, **kwargs: object) -> None:
        if os.getpid() != parent:
            os._exit(9)  # as if the OOM killer took the child mid-analysis

    monkeypatch.setattr(pipeline, "analyze_paths", die)
    assert _finish(_start(), RECORDED, tmp_path / "out") is None  # the caller analyzes here
    assert not (tmp_path / "out" / "verdict.json").exists()


def test_bad_input_in_the_child_is_the_same_one_line_error(tmp_path) -> None:
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "manifest.json").write_text("{not json")
    with pytest.raises(BadInputError) as here:
        pipeline.analyze_paths([str(bundle)], LoadOptions(), OutputOptions(), str(tmp_path / "a"))
    with pytest.raises(ChildError) as forked:
        _finish(_start(), bundle, tmp_path / "b")
    assert str(forked.value) == str(here.value)
    assert str(bundle / "manifest.json") in str(forked.value)
    assert forked.value.exit_code == ExitCode.BAD_INPUT


def test_a_bug_in_the_child_is_an_internal_error_with_its_traceback(tmp_path,
                                                                      monkeypatch) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("detector exploded")

    monkeypatch.setattr(pipeline, "analyze_evidence", broken)
    with pytest.raises(ChildCrash) as crash:
        _finish(_start(), RECORDED, tmp_path / "out")
    assert "Traceback" in str(crash.value)
    assert "RuntimeError: detector exploded" in str(crash.value)


def test_cancel_stops_the_child_and_nothing_is_written(tmp_path) -> None:
    analyzer = _start()
    pid = analyzer.pid
    analyzer.cancel()
    analyzer.cancel()  # idempotent, as run_attach's finally may call it after finish
    assert _gone(pid)
    assert _finish(analyzer, RECORDED, tmp_path / "out") is None
    assert list((tmp_path / "out").iterdir()) == []


def test_no_fork_while_other_threads_run(tmp_path) -> None:
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, name="bystander")
    thread.start()
    try:
        assert AnalyzerProcess.start(*_JOBS) is None
    finally:
        stop.set()
        thread.join()


@pytest.mark.parametrize("args, code", [
    (["attach", "--pid-group", "999999999"], 4),  # no such job: collection fails
    (["attach", "--pid-group", "1", "--samples", "0"], 2),  # bad option: the CLI refuses
])
def test_an_attach_that_stops_early_leaves_no_child(tmp_path, args, code) -> None:
    # GIVEN attach run as a user runs it
    proc = subprocess.Popen([sys.executable, "-m", "hangscope", *args, "--out",
                             str(tmp_path / "out")], start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        _, err = proc.communicate(timeout=60)
        # THEN it fails as usual, in one line, and nothing of its session is left running
        assert proc.returncode == code, err
        time.sleep(0.2)
        left = [p.pid for p in psutil.process_iter() if _pgid(p.pid) == proc.pid]
        assert left == []
    finally:
        for p in psutil.process_iter():
            if _pgid(p.pid) == proc.pid:
                p.kill()


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None
