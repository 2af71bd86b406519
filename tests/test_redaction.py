"""Secrets a log leaks stay out of everything hangscope writes or prints by default: the HTML
report, verdict.json, the terminal summary and ``--json``; ``--no-redact`` keeps them in all."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SECRET = "hunter2"
LOG = ("[rank1]: Traceback (most recent call last):\n"
       '[rank1]:   File "/job/train.py", line 3, in <module>\n'
       f"[rank1]: RuntimeError: store https://bob:{SECRET}@store.example/x refused, "
       f"password={SECRET}\n")


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hangscope", *args], capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize("extra", [[], ["--json"]], ids=["text", "json"])
def test_no_secret_in_any_output_by_default(tmp_path: Path, extra: list[str]) -> None:
    log = tmp_path / "rank1.log"
    log.write_text(LOG)
    out = tmp_path / "out"
    proc = _run("analyze", str(log), "--out", str(out), *extra)
    verdict = json.loads((out / "verdict.json").read_text())
    # the finding is still there, quoting the exception, with the secret masked
    assert verdict["findings"][0]["culprit_ranks"] == [1]
    assert "[REDACTED]" in verdict["findings"][0]["summary"]
    for where, text in (("stdout", proc.stdout), ("stderr", proc.stderr),
                        ("verdict.json", (out / "verdict.json").read_text()),
                        ("report.html", (out / "report.html").read_text())):
        assert SECRET not in text, where


def test_no_redact_keeps_them_everywhere(tmp_path: Path) -> None:
    log = tmp_path / "rank1.log"
    log.write_text(LOG)
    out = tmp_path / "out"
    proc = _run("analyze", str(log), "--out", str(out), "--no-redact")
    assert SECRET in proc.stdout
    assert SECRET in (out / "verdict.json").read_text()
    assert SECRET in (out / "report.html").read_text()
