"""What a new user meets in the first hour (issue 20): inputs that must not block, outputs that
never collide, and output that does not contradict itself. Through the real entry point."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RECORDED = ROOT / "fixtures" / "recorded"


def run_cli(*args: str, timeout: float = 60, cwd: str | None = None
            ) -> subprocess.CompletedProcess[str]:
    """``python -m hangscope ARGS``; a run that blocks fails the test at ``timeout`` (the child
    is killed by subprocess.run)."""
    return subprocess.run([sys.executable, "-m", "hangscope", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=cwd)


def verdict_of(out: Path) -> tuple[str, list[int]]:
    verdict = json.loads((out / "verdict.json").read_text())
    first = verdict["findings"][0] if verdict["findings"] else {}
    return first.get("kind", ""), first.get("culprit_ranks", [])


class TestNothingBlocks:
    """A FIFO (the FR trigger pipe torch creates beside its dumps), a UNIX socket and a link to
    /dev/zero among good dumps: each is one gap line, never opened, and the verdict is unchanged."""

    @pytest.fixture()
    def dumps(self, tmp_path: Path) -> Path:
        folder = tmp_path / "fr"
        shutil.copytree(RECORDED / "missing_rank" / "fr" / "json", folder)
        return folder

    def test_special_files_among_dumps_are_named_not_read(self, tmp_path, dumps) -> None:
        # GIVEN the verdict on good dumps alone
        clean = run_cli("analyze", str(dumps), "--out", str(tmp_path / "clean"))
        # AND the same folder with a FIFO, a listening socket and a link to /dev/zero
        os.mkfifo(dumps / "nccl_trace_rank_0.pipe")
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(str(dumps / "agent.sock"))
        listener.listen(1)
        os.symlink("/dev/zero", dumps / "zero.json")
        try:
            # WHEN it is analyzed (subprocess.run's timeout fails the test if anything blocks)
            proc = run_cli("analyze", str(dumps), "--out", str(tmp_path / "with"), timeout=60)
        finally:
            listener.close()
        # THEN the verdict is the one without them
        assert proc.returncode == clean.returncode, proc.stderr
        assert verdict_of(tmp_path / "with") == verdict_of(tmp_path / "clean")
        # AND each special file is one gap line saying what it is
        gaps = json.loads((tmp_path / "with" / "verdict.json").read_text())["evidence_gaps"]
        for name, what in (("nccl_trace_rank_0.pipe", "named pipe (FIFO)"),
                           ("agent.sock", "UNIX socket"), ("zero.json", "character device")):
            lines = [gap for gap in gaps if name in gap]
            assert len(lines) == 1, (name, gaps)
            assert what in lines[0], lines[0]
        pipe_line = next(gap for gap in gaps if "nccl_trace_rank_0.pipe" in gap)
        assert "TORCH_NCCL_DEBUG_INFO_PIPE_FILE" in pipe_line
        assert "asks the live job for a flight-recorder dump" in pipe_line

    def test_a_fifo_given_alone_is_one_line_not_a_hang(self, tmp_path) -> None:
        fifo = tmp_path / "nccl_trace_rank_0.pipe"
        os.mkfifo(fifo)
        proc = run_cli("analyze", str(fifo), "--out", str(tmp_path / "o"), timeout=60)
        assert proc.returncode == 2, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert "named pipe (FIFO)" in proc.stderr


class TestDefaultOut:
    def test_two_runs_in_a_row_get_two_folders(self, tmp_path) -> None:
        # GIVEN two analyze runs without --out, started in the same working folder
        dumps = str(RECORDED / "missing_rank" / "fr" / "json")
        first = run_cli("analyze", dumps, "-q", cwd=str(tmp_path))
        second = run_cli("analyze", dumps, "-q", cwd=str(tmp_path))
        # THEN both succeed, each in its own folder with its own verdict
        assert first.returncode == second.returncode == 3, (first.stderr, second.stderr)
        folders = sorted(p for p in tmp_path.iterdir() if p.name.startswith("hangscope-"))
        assert len(folders) == 2, folders
        assert all((folder / "verdict.json").is_file() for folder in folders)

    def test_the_same_second_gets_a_suffix(self, tmp_path, monkeypatch) -> None:
        from hangscope.pipeline import default_out_dir

        monkeypatch.chdir(tmp_path)
        monkeypatch.setattr("time.strftime", lambda fmt, *a: "hangscope-20260101-000000")
        made = [default_out_dir() for _ in range(3)]
        assert [os.path.basename(p) for p in made] == [
            "hangscope-20260101-000000", "hangscope-20260101-000000-2",
            "hangscope-20260101-000000-3"]

    def test_bad_input_leaves_no_empty_default_folder(self, tmp_path) -> None:
        garbage = tmp_path / "in" / "x.bin"
        garbage.parent.mkdir()
        garbage.write_bytes(b"\x00\x01")
        proc = run_cli("analyze", str(garbage), cwd=str(tmp_path))
        assert proc.returncode == 2
        assert not [p for p in tmp_path.iterdir() if p.name.startswith("hangscope-")]

    def test_an_explicit_out_keeps_the_force_rule(self, tmp_path) -> None:
        out = tmp_path / "out"
        out.mkdir()
        (out / "old").write_text("x")
        proc = run_cli("analyze", str(RECORDED / "missing_rank" / "fr" / "json"),
                       "--out", str(out))
        assert proc.returncode == 2
        assert "--out is not empty (pass --force to overwrite)" in proc.stderr


class TestOomQuotesTheMessage:
    """The OOM finding quotes the line's message, not its class, and the rank table agrees."""

    @pytest.mark.parametrize("log, rank, message", [
        ("own", 0, "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB"),
        (str(ROOT / "fixtures/logs/real/b_msswift_6301_rank11_oom.log"), 11,
         "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.35 GiB"),
        (str(RECORDED / "rank_oom"), 2,
         "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"),
    ], ids=["runtime-error-line", "msswift-rank11", "recorded-rank-oom"])
    def test_summary_quotes_the_message(self, tmp_path, log, rank, message) -> None:
        if log == "own":
            path = tmp_path / "rank0.log"
            path.write_text(
                "[rank0]: Traceback (most recent call last):\n"
                '[rank0]:   File "train.py", line 10, in <module>\n'
                "[rank0]:     loss.backward()\n"
                "[rank0]: RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; "
                "79.15 GiB total capacity; 75.00 GiB already allocated)\n")
            log = str(path)
        proc = run_cli("analyze", log, "--out", str(tmp_path / "o"))
        verdict = json.loads((tmp_path / "o" / "verdict.json").read_text())
        first = verdict["findings"][0]
        assert (first["kind"], first["culprit_ranks"]) == ("rank_oom", [rank])
        assert message in first["summary"], first["summary"]
        assert f"[rank{rank}]:" not in first["summary"]
        assert message in proc.stdout
        table = proc.stdout.split("Rank groups")[1].split("\n\n")[0]
        culprit_row = next(row for row in table.splitlines() if "[culprit]" in row)
        assert "no error" not in culprit_row, culprit_row


def test_desync_explanation_quotes_the_logs_own_numbers(tmp_path) -> None:
    # GIVEN rank 0's desync report: rank 7 finished #182 and did not join #183; the others
    # time out in #315 and #317
    log = ROOT / "fixtures/logs/real/a_pytorch_152623_desync_rank7_lagging.log"
    proc = run_cli("analyze", str(log), "--out", str(tmp_path / "o"))
    first = json.loads((tmp_path / "o" / "verdict.json").read_text())["findings"][0]
    # THEN rank 7 is the culprit, quoted with the report's own numbers
    assert (first["kind"], first["culprit_ranks"]) == ("missing_rank", [7])
    assert "rank 7 completed ALLREDUCE #182 and did not join #183" in first["summary"]
    assert "rank 7 completed ALLREDUCE #315" not in proc.stdout
    assert "rank 0 waits in ALLREDUCE #315" in first["summary"]


SECRET_LOG = ('[rank1]: Traceback (most recent call last):\n'
              '[rank1]:   File "train.py", line 10, in <module>\n'
              '[rank1]:     connect()\n'
              '[rank1]: RuntimeError: cannot reach the db with password=hunter2\n')


class TestRedactionEverywhere:
    """A secret in a log is masked in everything hangscope writes or prints, unless --no-redact."""

    @pytest.fixture()
    def logs(self, tmp_path: Path) -> Path:
        folder = tmp_path / "logs"
        folder.mkdir()
        (folder / "rank1.log").write_text(SECRET_LOG)
        return folder

    def test_masked_in_verdict_report_and_terminal(self, tmp_path, logs) -> None:
        text = run_cli("analyze", str(logs), "--out", str(tmp_path / "o"))
        as_json = run_cli("analyze", str(logs), "--out", str(tmp_path / "j"), "--json")
        rendered = run_cli("report", str(logs), "--format", "text")
        outputs = {"stdout": text.stdout, "--json": as_json.stdout, "report": rendered.stdout,
                   "verdict.json": (tmp_path / "o" / "verdict.json").read_text(),
                   "report.html": (tmp_path / "o" / "report.html").read_text()}
        # THEN the finding is there, its secret is not
        assert "cannot reach the db with password=[REDACTED]" in outputs["verdict.json"]
        leaked = [name for name, out in outputs.items() if "hunter2" in out]
        assert not leaked, leaked

    def test_no_redact_keeps_it_everywhere(self, tmp_path, logs) -> None:
        text = run_cli("analyze", str(logs), "--out", str(tmp_path / "o"), "--no-redact")
        assert "password=hunter2" in text.stdout
        assert "password=hunter2" in (tmp_path / "o" / "verdict.json").read_text()
        assert "password=hunter2" in (tmp_path / "o" / "report.html").read_text()

    def test_bundle_copies_are_masked_but_dumps_are_kept(self, tmp_path) -> None:
        from hangscope.bundle import BundleWriter

        writer = BundleWriter(str(tmp_path / "b"), redact=True)
        log = writer.add_file(1, "log", "rank1.log", SECRET_LOG.encode())
        record = writer.add_file(1, "proc", "proc-1.json",
                                 json.dumps({"cmdline": "train --password=hunter2 --x"}).encode())
        dump = writer.add_file(1, "fr", "fr_dump", b"\x80\x04password=hunter2\xff")
        writer.job = {"cmdline": "torchrun train.py --password=hunter2"}
        manifest = writer.close()
        assert "hunter2" not in Path(manifest).read_text()
        assert "hunter2" not in Path(log).read_text()
        assert json.loads(Path(record).read_text()) == {
            "cmdline": "train --password=[REDACTED] --x"}
        assert Path(dump).read_bytes() == b"\x80\x04password=hunter2\xff"
        kept = BundleWriter(str(tmp_path / "k"), redact=False)
        assert "hunter2" in Path(kept.add_file(1, "log", "r.log", SECRET_LOG.encode())).read_text()

    def test_collect_and_fanouts_pass_no_redact_on(self) -> None:
        from hangscope.cli import _attach_options
        from hangscope.cluster.cli_options import collect_args

        assert _attach_options(1, (), None, 3, 1.0, 8, 5.0, False, False, False, False, None,
                               None, None).redact
        assert not _attach_options(1, (), None, 3, 1.0, 8, 5.0, False, False, False, False,
                                   None, None, None, redact=False).redact
        assert "--no-redact" in collect_args(no_redact=True)
        assert "--no-redact" not in collect_args()


def test_a_file_line_named_like_a_secret_is_not_masked() -> None:
    from hangscope.redact import redact_text

    assert redact_text("at Tokenizer.count (tokenizer.py:34)") == \
        "at Tokenizer.count (tokenizer.py:34)"
    assert redact_text("auth_token: 1234") == "auth_token: [REDACTED]"
    assert redact_text("HF_TOKEN=hf_abc") == "HF_TOKEN=[REDACTED]"


class TestGapsGrouped:
    def test_per_rank_lines_of_one_cause_are_one_line(self) -> None:
        from hangscope.analysis.gaps import group_gaps

        launcher = "/var/log/job.out"
        gaps = [f"rank {r}: {fd} goes to the launcher (pid 100)'s output file {launcher} "
                "(collected once, as the launcher log)" for r in range(4)
                for fd in ("stdout", "stderr")]
        gaps += [f"rank {r} (pid {200 + r}): stderr is a pipe: not collected" for r in (2, 3)]
        gaps += [f"rank {r}: no flight-recorder dump at /tmp/nccl_trace_rank_{r}"
                 for r in range(4)]
        gaps += ["rank 5: rank 5: permission denied", "a job-wide line", "a job-wide line"]
        assert group_gaps(gaps, culprits=[5]) == [
            "rank 5: permission denied",
            f"ranks 0-3: stdout goes to the launcher (pid 100)'s output file {launcher} "
            "(collected once, as the launcher log)",
            f"ranks 0-3: stderr goes to the launcher (pid 100)'s output file {launcher} "
            "(collected once, as the launcher log)",
            "ranks 2,3: stderr is a pipe: not collected",
            "ranks 0-3: no flight-recorder dump at /tmp/nccl_trace_rank_*",
            "a job-wide line"]

    def test_a_bundles_gaps_are_grouped(self, tmp_path) -> None:
        run_cli("analyze", str(ROOT / "fixtures/bundles/ddp_imbalanced"),
                "--out", str(tmp_path / "o"))
        gaps = json.loads((tmp_path / "o" / "verdict.json").read_text())["evidence_gaps"]
        dumps = [gap for gap in gaps if "no flight-recorder dump" in gap]
        assert dumps == ["ranks 0-3: no flight-recorder dump at /tmp/nccl_trace_rank_*"], gaps

    @pytest.mark.parametrize("scenario, caveat", [
        ("missing_rank/fr/json", False),  # a culprit, named with the p2p possibility in its text
        ("p2p_deadlock", True),  # the ranks sit in send/recv
    ])
    def test_the_gloo_p2p_caveat_only_where_p2p_may_be_involved(self, tmp_path, scenario,
                                                                 caveat) -> None:
        run_cli("analyze", str(RECORDED / scenario), "--out", str(tmp_path / "o"))
        gaps = json.loads((tmp_path / "o" / "verdict.json").read_text())["evidence_gaps"]
        assert any("does not record send/recv" in gap for gap in gaps) is caveat, gaps


class TestManners:
    def test_report_to_a_terminal_prints_text_and_html_to_a_pipe(self, tmp_path) -> None:
        import pty

        dumps = str(RECORDED / "missing_rank" / "fr" / "json")
        main_fd, child_fd = pty.openpty()
        try:
            proc = subprocess.run([sys.executable, "-m", "hangscope", "report", dumps],
                                  stdout=child_fd, stderr=subprocess.PIPE, timeout=60)
            os.close(child_fd)
            child_fd = -1
            shown = b""
            while True:
                try:
                    chunk = os.read(main_fd, 65536)
                except OSError:  # EIO: the child's side is closed and drained
                    break
                if not chunk:
                    break
                shown += chunk
        finally:
            os.close(main_fd)
            if child_fd >= 0:
                os.close(child_fd)
        assert proc.returncode == 3, proc.stderr
        assert b"ROOT CAUSE: missing_rank" in shown and b"<html" not in shown
        piped = run_cli("report", dumps)
        assert piped.stdout.lstrip().lower().startswith("<!doctype html")

    def test_a_text_file_named_on_the_command_line_is_read_whatever_its_name(self,
                                                                           tmp_path) -> None:
        text = "lorem ipsum dolor sit amet\nnothing a scanner knows\n"
        (tmp_path / "x.log").write_text(text)
        (tmp_path / "x").write_text(text)
        named = run_cli("analyze", str(tmp_path / "x.log"), "--out", str(tmp_path / "a"))
        bare = run_cli("analyze", str(tmp_path / "x"), "--out", str(tmp_path / "b"))
        assert named.returncode == bare.returncode == 1, (named.stderr, bare.stderr)
        assert "not a recognised evidence file" not in bare.stderr

    def test_match_never_counts_hangscopes_own_processes(self) -> None:
        import re

        from hangscope.discover.proctree import find_roots, snapshot

        marker = "31.4159265"
        # GIVEN a job process and a forked copy of this process (attach's analyzer is one),
        # both matching the pattern
        job = subprocess.Popen(["sleep", marker])
        read, write = os.pipe()
        copy = os.fork()
        if copy == 0:  # the copy waits for the pipe to close, then leaves at once
            os.close(write)
            os.read(read, 1)
            os._exit(0)
        os.close(read)
        try:
            table = snapshot()
            own = re.escape(table[os.getpid()].line)
            assert table[copy].line == table[os.getpid()].line  # the copy matches like we do
            pattern = re.compile(rf"sleep {re.escape(marker)}|^{own}$")
            roots = find_roots(table, None, [], pattern, [])
            # THEN the job is a candidate; this process and its copy are not
            assert job.pid in roots, roots
            assert copy not in roots and os.getpid() not in roots, (roots, copy)
        finally:
            os.close(write)
            os.waitpid(copy, 0)
            job.kill()
            job.wait(timeout=10)

    def test_progress_line_survives_a_terminal_of_zero_columns(self, monkeypatch) -> None:
        import io

        from hangscope import progress

        monkeypatch.setattr(os, "get_terminal_size", lambda fd: os.terminal_size((0, 0)))
        with open(os.devnull, "w") as stream:
            assert progress._columns(stream) == 80
        assert progress._columns(io.StringIO()) == 80

    def test_grammar_of_one(self, tmp_path) -> None:
        (tmp_path / "rank0.log").write_text(SECRET_LOG.replace("rank1", "rank0"))
        (tmp_path / "junk.bin").write_bytes(b"\x00\x01\x02")
        proc = run_cli("analyze", str(tmp_path / "rank0.log"), str(tmp_path / "junk.bin"),
                       "--out", str(tmp_path / "o"))
        tally = proc.stdout.strip().splitlines()[-1]
        assert "| 1 rank with evidence" in tally and "| 1 input problem (" in tally, tally
        assert "world size 1; evidence from rank 0" in proc.stdout
        empty = tmp_path / "empty.log"
        empty.write_text("just words\n")
        unknown = run_cli("analyze", str(empty), "--out", str(tmp_path / "e"))
        assert "world size unknown; evidence from no rank" in unknown.stdout
        assert "world size ?" not in unknown.stdout and "ranks none" not in unknown.stdout

    def test_help_says_what_each_command_reads_and_writes(self) -> None:
        analyze = run_cli("analyze", "--help").stdout
        assert "logs" in analyze and "py-spy" in analyze and "verdict.json" in analyze
        collect = run_cli("collect", "--help").stdout
        assert "no analysis" in collect and "analyzing" not in collect
        watch = run_cli("watch", "--help").stdout
        assert "-q, --quiet" in watch


class TestOutputAgrees:
    def test_the_rank_table_marks_only_the_ranks_the_finding_names(self, tmp_path) -> None:
        # GIVEN a straggler that the logs tell apart from a rank in the same FR state
        proc = run_cli("analyze", str(RECORDED / "straggler"), "--out", str(tmp_path / "o"))
        verdict = json.loads((tmp_path / "o" / "verdict.json").read_text())
        named = verdict["findings"][0]["culprit_ranks"]
        marked = sorted(r for cls in verdict["rank_classes"] if cls["role"] == "culprit"
                        for r in cls["ranks"])
        assert (verdict["findings"][0]["kind"], named) == ("straggler", [2])
        assert marked == named, verdict["rank_classes"]
        assert "0,2  [culprit]" not in proc.stdout

    @pytest.mark.parametrize("scenario", ["rank_oom", "missing_rank", "straggler",
                                          "python_deadlock", "eval_summary_lock"])
    def test_one_rank_waits(self, tmp_path, scenario) -> None:
        import re

        run_cli("analyze", str(RECORDED / scenario), "--out", str(tmp_path / "o"))
        text = (tmp_path / "o" / "verdict.json").read_text()
        assert not re.search(r"\brank \d+ wait (in|for|on)\b", text), re.findall(
            r"[^.;]*\brank \d+ wait (?:in|for|on)\b[^.;]*", text)

    def test_a_lock_is_named_once(self, tmp_path) -> None:
        run_cli("analyze", str(RECORDED / "python_deadlock"), "--out", str(tmp_path / "o"))
        summary = json.loads((tmp_path / "o" / "verdict.json").read_text())["findings"][0][
            "summary"]
        assert "main thread is blocked on lock.acquire (source line: with self.stats_lock:) at " \
            "Metrics.update_metrics" in summary, summary
        assert "): lock lock.acquire" not in summary
