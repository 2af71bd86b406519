"""Nothing blocks: a FIFO (what TORCH_NCCL_DEBUG_INFO_PIPE_FILE creates), a UNIX socket or a
device among the dumps is named in one gap line and never opened, and the verdict is the one the
dumps give without it. ``analyze`` runs in a subprocess with a deadline: a regression hangs it."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

RECORDED = Path(__file__).resolve().parent.parent / "fixtures" / "recorded" / "missing_rank"


def _analyze(*args: str) -> tuple[int, str, dict]:  # type: ignore[type-arg]
    out = Path(args[-1])
    proc = subprocess.run([sys.executable, "-m", "hangscope", "analyze", *args[:-1], "--out",
                           str(out), "--force", "--quiet"],
                          capture_output=True, text=True, timeout=60)
    verdict = json.loads((out / "verdict.json").read_text()) if (out / "verdict.json").exists() \
        else {}
    return proc.returncode, proc.stdout + proc.stderr, verdict


def _root(verdict: dict) -> tuple[str, list[int]]:  # type: ignore[type-arg]
    first = verdict["findings"][0]
    return first["kind"], first["culprit_ranks"]


def test_a_fifo_a_socket_and_a_device_among_dumps_are_named_not_read(tmp_path: Path) -> None:
    # GIVEN good FR dumps, beside them the FR trigger pipe, another FIFO, a socket, /dev/zero
    dumps = tmp_path / "d"
    shutil.copytree(RECORDED / "fr" / "pickle", dumps)
    os.mkfifo(dumps / "nccl_trace_rank_0.pipe")
    os.mkfifo(dumps / "notes")
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(dumps / "probe.sock"))
    (dumps / "zeros").symlink_to("/dev/zero")
    try:
        # WHEN analyzed, and the same dumps without them
        code, _, verdict = _analyze(str(dumps), str(tmp_path / "out"))
        clean = tmp_path / "clean"
        shutil.copytree(RECORDED / "fr" / "pickle", clean)
        code_clean, _, verdict_clean = _analyze(str(clean), str(tmp_path / "out-clean"))
    finally:
        server.close()
    # THEN the same verdict, and one gap line for each, saying what it is
    assert (code, _root(verdict)) == (code_clean, _root(verdict_clean))
    gaps = verdict["evidence_gaps"]
    for name, words in (("nccl_trace_rank_0.pipe", "makes the live rank 0 dump"),
                        ("notes", "named pipe (FIFO)"), ("probe.sock", "a socket"),
                        ("zeros", "a character device")):
        lines = [g for g in gaps if g.startswith(str(dumps / name) + ":")]
        assert len(lines) == 1 and words in lines[0], (name, gaps)


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_special_file_given_alone_is_one_line(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "nccl_trace_rank_3.pipe"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    code, output, _ = _analyze(str(path), str(tmp_path / "out"))
    assert code == 2 and "Traceback" not in output, output
    assert str(path) in output and len(output.strip().splitlines()) == 1, output
