"""What a new user meets in the first hour (issue 20), beyond what test_cli, test_redaction and
test_special_files cover: no empty folder left by bad input, secrets masked in the bundle too,
gap lines a bundle says twice, and sentences whose verb agrees with one rank."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RECORDED = ROOT / "fixtures" / "recorded"
SECRET_LOG = ('[rank1]: Traceback (most recent call last):\n'
              '[rank1]:   File "train.py", line 10, in <module>\n'
              '[rank1]:     connect()\n'
              '[rank1]: RuntimeError: cannot reach the db with password=hunter2\n')


def run_cli(*args: str, cwd: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hangscope", *args], capture_output=True,
                          text=True, timeout=60, cwd=cwd)


def test_bad_input_leaves_no_empty_default_folder(tmp_path) -> None:
    # GIVEN garbage and no --out: the default folder is made before anything is read
    garbage = tmp_path / "in" / "x.bin"
    garbage.parent.mkdir()
    garbage.write_bytes(b"\x00\x01")
    proc = run_cli("analyze", str(garbage), cwd=str(tmp_path))
    # THEN one line, exit 2, and the folder made for it is gone again
    assert proc.returncode == 2, proc.stderr
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("hangscope-")]


class TestRedactionInTheBundle:
    def test_copies_are_masked_but_dumps_are_kept(self, tmp_path) -> None:
        from hangscope.bundle import BundleWriter

        # GIVEN a collection that copies a log, a JSON record and an FR dump, all with a secret
        writer = BundleWriter(str(tmp_path / "b"), redact=True)
        log = writer.add_file(1, "log", "rank1.log", SECRET_LOG.encode())
        record = writer.add_file(1, "proc", "proc-1.json",
                                 json.dumps({"cmdline": "train --password=hunter2 --x"}).encode())
        dump = writer.add_file(1, "fr", "fr_dump", b"\x80\x04password=hunter2\xff")
        writer.job = {"cmdline": "torchrun train.py --password=hunter2"}
        manifest = writer.close()
        # THEN the log, the record (still JSON) and the manifest are masked; the dump is as is
        assert "hunter2" not in Path(log).read_text()
        assert json.loads(Path(record).read_text()) == {
            "cmdline": "train --password=[REDACTED] --x"}
        assert "hunter2" not in Path(manifest).read_text()
        assert Path(dump).read_bytes() == b"\x80\x04password=hunter2\xff"
        # AND without redaction (--no-redact) the copy is the evidence as collected
        kept = BundleWriter(str(tmp_path / "k"), redact=False)
        assert "hunter2" in Path(kept.add_file(1, "log", "r.log", SECRET_LOG.encode())).read_text()

    def test_attach_collect_and_the_fanouts_pass_no_redact_on(self) -> None:
        from hangscope.cli import _attach_options
        from hangscope.cluster.cli_options import collect_args

        shared = (1, (), None, 3, 1.0, 8, 5.0, False, False, False, False, None, None, None)
        assert _attach_options(*shared).redact
        assert not _attach_options(*shared, redact=False).redact
        assert "--no-redact" in collect_args(no_redact=True)
        assert "--no-redact" not in collect_args()
        help_text = run_cli("collect", "--help").stdout
        assert "--no-redact" in help_text

    def test_a_file_line_named_like_a_secret_is_not_masked(self) -> None:
        from hangscope.redact import redact_text

        assert redact_text("at Tokenizer.count (tokenizer.py:34)") == \
            "at Tokenizer.count (tokenizer.py:34)"
        assert redact_text("auth_token: 1234") == "auth_token: [REDACTED]"
        assert redact_text("HF_TOKEN=hf_abc") == "HF_TOKEN=[REDACTED]"


def test_a_bundles_gaps_said_with_their_rank_twice_are_grouped(tmp_path) -> None:
    # GIVEN an older bundle whose manifest gaps already say "rank N: " (merged again with it)
    run_cli("analyze", str(ROOT / "fixtures/bundles/ddp_imbalanced"),
            "--out", str(tmp_path / "o"))
    gaps = json.loads((tmp_path / "o" / "verdict.json").read_text())["evidence_gaps"]
    # THEN one line for the four ranks, the rank said once
    dumps = [gap for gap in gaps if "no flight-recorder dump" in gap]
    assert dumps == ["ranks 0-3: no flight-recorder dump at /tmp/nccl_trace_rank_N"], gaps


@pytest.mark.parametrize("scenario", ["rank_oom", "missing_rank", "straggler",
                                      "python_deadlock", "eval_summary_lock"])
def test_one_rank_waits(tmp_path, scenario) -> None:
    run_cli("analyze", str(RECORDED / scenario), "--out", str(tmp_path / "o"))
    text = (tmp_path / "o" / "verdict.json").read_text()
    assert not re.search(r"\brank \d+ wait (in|for|on)\b", text), re.findall(
        r"[^.;]*\brank \d+ wait (?:in|for|on)\b[^.;]*", text)
