"""What a paste's relay or quotation put around the log (``sources/logs/heads.py``): a Markdown
indentation or fence, a collector's timestamp, a quote, a screen's padding. Each is taken off before
any parser reads the lines, and each line keeps its number in the file as the user has it."""

from __future__ import annotations

import os

from hangscope.analysis.engine import analyze
from hangscope.options import LoadOptions
from hangscope.sources.load import load_paths
from hangscope.sources.logs import scan_log
from hangscope.sources.logs.normalize import normalize
from hangscope.sources.pyspy import load_pyspy_file

RECORDED = os.path.join(os.path.dirname(__file__), "..", "fixtures", "stacks", "recorded")

WATCHDOG = ("[rank2]:[E424 01:11:21.160832730 ProcessGroupNCCL.cpp:629] [Rank 2] Watchdog caught "
            "collective operation timeout: WorkNCCL(SeqNum=4, OpType=BROADCAST, NumelIn=112, "
            "NumelOut=112, Timeout(ms)=1800000) ran for 1800010 milliseconds before timing out.")
TRACEBACK = [
    "Traceback (most recent call last):",
    '  File "/opt/train.py", line 41, in <module>',
    "    main()",
    '  File "/opt/train.py", line 30, in main',
    "    loss.backward()",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total "
    "capacity of 79.33 GiB of which 1.02 GiB is free.",
]


def _lines(data: str) -> list[str]:
    fixed = normalize(data.encode())
    assert fixed is not None
    return fixed.data.decode().splitlines()


def _verdict(tmp_path, text: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "log.txt"
    path.write_text(text)
    evidence, _ = load_paths([str(path)], LoadOptions())
    verdict, _ = analyze(evidence)
    first = verdict.findings[0] if verdict.findings else None
    return (first.kind.value, tuple(first.culprit_ranks)) if first else verdict.status.value


def test_a_markdown_indented_code_block_reads_as_the_log(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # GIVEN a traceback pasted as an indented code block (four blanks before every line)
    plain = "\n".join(TRACEBACK) + "\n"
    indented = "".join(f"    {line}\n" for line in TRACEBACK)
    # THEN the common indentation goes and the frames keep their own
    assert _lines(indented) == TRACEBACK
    assert _verdict(tmp_path, indented) == _verdict(tmp_path, plain)


def test_an_indented_py_spy_dump_is_read_not_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # GIVEN a recorded py-spy text dump, indented as a Markdown code block
    text = open(os.path.join(RECORDED, "gloo-rank0.txt"), encoding="utf-8").read()
    path = tmp_path / "pyspy.txt"
    path.write_text("".join(f"    {line}" if line.strip() else line
                            for line in text.splitlines(keepends=True)))
    # THEN it gives the threads and frames the dump as written gives
    original = tmp_path / "original.txt"
    original.write_text(text)
    (_, want), = load_pyspy_file(str(original))
    (_, got), = load_pyspy_file(str(path))
    assert [t.frames for t in got.threads] == [t.frames for t in want.threads]
    assert want.threads and want.threads[0].frames


def test_a_collectors_timestamps_are_peeled_and_lines_keep_their_numbers(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # GIVEN ``kubectl logs --timestamps`` output: every physical line stamped, frames included
    lines = [WATCHDOG, *TRACEBACK]
    stamped = "".join(f"2025-03-01T10:00:{i:02d}.123456789Z {line}\n"
                      for i, line in enumerate(lines))
    assert _lines(stamped) == lines
    plain = "\n".join(lines) + "\n"
    assert _verdict(tmp_path, stamped) == _verdict(tmp_path, plain)
    # AND events cite the line of the file as it is
    path = tmp_path / "stamped.log"
    path.write_text("\n\n" + stamped)
    watchdog = [e for e in scan_log(str(path)) if e.kind == "nccl_watchdog_timeout"]
    assert [e.line_no for e in watchdog] == [3]


def test_journald_heads_are_peeled_but_kernel_lines_keep_theirs() -> None:
    journal = "".join(f"Mar 01 10:00:0{i} gpu-node-7 python3[88123]: {line}\n"
                      for i, line in enumerate(TRACEBACK))
    assert _lines(journal) == TRACEBACK
    # a kernel log read through syslog is the kernel parsers' to read, head and all
    kernel = ("Mar 01 10:00:01 gpu-node-7 kernel: [1234.5] python3 invoked oom-killer\n"
              "Mar 01 10:00:01 gpu-node-7 kernel: [1234.6] Out of memory: Killed process 88123\n")
    fixed = normalize(kernel.encode())
    assert fixed is None or fixed.data.decode() == kernel


def test_a_programs_own_timestamps_stay_for_the_line_parser() -> None:
    # GIVEN a program that stamps its own records in RFC 3339, each with its level, and leaves a
    # traceback's lines bare
    own = ("2025-03-01T10:00:00Z INFO starting epoch 3\n"
           "2025-03-01T10:00:05Z WARNING slow step\n"
           "2025-03-01T10:00:09Z ERROR step failed\n" + "\n".join(TRACEBACK) + "\n")
    # THEN its stamps are no collector's: nothing is peeled
    fixed = normalize(own.encode())
    assert fixed is None or fixed.data.decode() == own


def test_one_line_from_a_container_log_file_or_kubectl_prefix_is_peeled(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # GIVEN one line copied out of a node's container log file (CRI: time, stream, F) or out of
    # ``kubectl logs --prefix``: heads no program writes for itself
    line = "[rank5]: " + TRACEBACK[-1]
    cri = f"2025-07-25T07:53:08.217487+08:00 stderr F {line}\n"
    kube = f"[pod/trainer-worker-1/pytorch] {line}\n"
    # THEN each is peeled though the paste is one line, and reads as the line alone
    assert _lines(cri) == [line] == _lines(kube)
    assert _verdict(tmp_path, cri) == ("rank_oom", (5,)) == _verdict(tmp_path, kube)
    # AND heads a program may write at a line's start are still not taken off one line
    own = f"node1: {line}\n"
    assert (fixed := normalize(own.encode())) is None or fixed.data.decode() == own


def test_a_container_log_files_partial_pieces_are_joined(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # GIVEN a node's container log file where the kubelet split a long stderr line into pieces
    # tagged P (partial) and F, with a stdout line of another rank before and after
    oom = "[rank2]: " + TRACEBACK[-1]
    cut = (len(oom) // 3, 2 * len(oom) // 3)
    pieces = [("P", oom[:cut[0]]), ("P", oom[cut[0]:cut[1]]), ("F", oom[cut[1]:])]
    cri = "2025-07-25T07:53:08.1Z stdout F [rank0]: step 7 loss 2.31\n" + "".join(
        f"2025-07-25T07:53:08.2Z stderr {tag} {piece}\n" for tag, piece in pieces) + \
        "2025-07-25T07:53:08.3Z stdout F [rank0]: step 8 loss 2.30\n"
    # THEN the pieces are one line again, the others stay their own, and it reads as rank 2's OOM
    assert _lines(cri) == ["[rank0]: step 7 loss 2.31", oom, "[rank0]: step 8 loss 2.30"]
    assert _verdict(tmp_path, cri) == ("rank_oom", (2,))
    # AND a partial piece is joined only with its own stream's next piece
    other = cri.replace("stderr F", "stdout F")
    assert _lines(other)[1:3] == [oom[:cut[1]], oom[cut[1]:]]


def test_two_relays_heads_stacked_are_both_peeled(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # GIVEN a traceback relayed by srun -l (task 3) and then stamped by a log collector, and the
    # same under pdsh's head quoted in a reply
    stamped = "".join(f"2024-05-01T12:00:{i:02d}.123456789Z 3: {line}\n"
                      for i, line in enumerate(TRACEBACK))
    quoted = "".join(f"> node-7: {line}\n" for line in TRACEBACK)
    # THEN both heads go: srun's task becomes the rank, the frames are frames again
    assert _lines(stamped) == [f"[rank3]: {line}" for line in TRACEBACK]
    assert _lines(quoted) == TRACEBACK
    assert _verdict(tmp_path, stamped) == ("rank_oom", (3,))
    # AND a program's own stamp under a collector's stays for the line parser
    own = "".join(f"2024-05-01T12:00:0{i}Z 2024-05-01 12:00:0{i},123 INFO step {i}\n"
                  for i in range(4))
    assert _lines(own) == [line[21:] for line in own.splitlines()]


def test_a_quoted_paste_one_line_or_a_quote_of_a_quote(tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert _lines(f"> {WATCHDOG}\n") == [WATCHDOG]
    assert _lines(f"> > {TRACEBACK[0]}\n> >\n> > {TRACEBACK[1]}\n") == \
        [TRACEBACK[0], "", TRACEBACK[1]]
    assert _verdict(tmp_path, f"> {WATCHDOG}\n") == _verdict(tmp_path, WATCHDOG + "\n")


def test_code_fences_and_blank_lines_before_the_log_are_no_part_of_it() -> None:
    fenced = "\n```text\n" + "\n".join(TRACEBACK) + "\n```\n"
    fixed = normalize(fenced.encode())
    assert fixed is not None
    assert fixed.data.decode().splitlines()[:len(TRACEBACK)] == TRACEBACK
    # (the first line of the log is the file's third)
    assert fixed.original_line(1) == 3


def test_a_screen_copied_with_its_padding_reads_as_the_log(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # GIVEN a terminal 100 columns wide, copied with every row padded to its width: the
    # watchdog's record takes three rows, the last padded
    rows = [WATCHDOG[i:i + 100] for i in range(0, len(WATCHDOG), 100)] + TRACEBACK[:5]
    screen = "".join(row.ljust(100) + "\n" for row in rows)
    # THEN the padding goes and the cut record is whole again
    assert _lines(screen) == [WATCHDOG, *TRACEBACK[:5]]
    plain = "\n".join([WATCHDOG, *TRACEBACK[:5]]) + "\n"
    assert _verdict(tmp_path, screen) == _verdict(tmp_path, plain)


def test_blanks_at_the_end_of_every_line_are_dropped() -> None:
    # a Markdown line break ("two blanks") or an editor's habit, on lines of any length
    assert _lines("".join(f"{line}  \n" for line in TRACEBACK)) == TRACEBACK


def test_a_bars_blank_part_wrapped_is_no_screens_padding() -> None:
    # GIVEN a tqdm bar whose unfilled part runs past the width, wrapped at 80 among lines that
    # end short: the blanks are the bar's, not a screen's (rows that end short are unpadded)
    bar = "  0%|" + " " * 150 + "| 0/231 [00:00<?, ?it/s]"
    text = [bar[i:i + 80] for i in range(0, len(bar), 80)] + ["epoch 0 done", "epoch 1 done"]
    lines = _lines("\n".join(text) + "\n")
    assert lines[0] == bar


def test_a_viewers_line_numbers_are_taken_off(tmp_path) -> None:  # type: ignore[no-untyped-def]
    plain = "\n".join([WATCHDOG] + TRACEBACK) + "\n"
    lines = [WATCHDOG] + TRACEBACK
    # GIVEN the log copied out of `cat -n`, out of a web viewer (from line 118, "118 | "), and out
    # of `nl`, which leaves blank lines unnumbered
    cat_n = "".join(f"{i:>6}\t{line}\n" for i, line in enumerate(lines, 1))
    viewer = "".join(f"{i:>4} | {line}\n" for i, line in enumerate(lines, 118))
    nl = "".join(f"{i:>6}\t{line}\n" for i, line in enumerate(lines[:3], 1)) + "\n" + \
        "".join(f"{i:>6}\t{line}\n" for i, line in enumerate(lines[3:], 4))
    # THEN each reads as the log, a frame's own indentation kept
    assert _lines(cat_n) == lines
    assert _lines(viewer) == lines
    assert _lines(nl) == lines[:3] + [""] + lines[3:]
    assert _verdict(tmp_path, cat_n) == _verdict(tmp_path, viewer) == _verdict(tmp_path, plain)


def test_a_programs_own_count_at_the_start_of_its_lines_stays() -> None:
    # GIVEN a loop's own prints: a step from 0, or from 1 but out of a column; and srun -l's
    # task heads of ranks 1 to 4, one line each
    from_zero = "".join(f"{i} loss {2.5 - i / 10:.2f}\n" for i in range(12))
    ragged = "".join(f"{i} loss {2.5 - i / 10:.2f}\n" for i in range(1, 13))
    tasks = "".join(f"{i}: using device cuda:{i}\n" for i in range(1, 5))
    # THEN nothing is taken off
    for text in (from_zero, ragged):
        fixed = normalize(text.encode())
        assert fixed is None or fixed.data.decode() == text
    fixed = normalize(tasks.encode())
    assert fixed is not None and fixed.data.decode().startswith("[rank1]: using device cuda:1\n")


def test_a_wrapped_paste_quoted_afterwards_is_rejoined_at_its_own_width() -> None:
    # GIVEN a watchdog line and a traceback hard-wrapped at 78 columns, then quoted ("> "): the
    # quoted pieces are 80 long, a common width of their own
    lines = [WATCHDOG] + TRACEBACK
    wrapped = []
    for line in lines:
        while len(line) > 78:
            wrapped.append(line[:78])
            line = line[78:]
        wrapped.append(line)
    quoted = "".join(f"> {piece}\n" for piece in wrapped)
    # THEN every piece carrying the quote again says nothing was cut at 80: the lines are
    # rejoined at 78, where they were cut
    assert _lines(quoted) == lines
