"""The normalizer: a paste hard-wrapped at a terminal's width reads like the original."""

from __future__ import annotations

import glob
import os

import pytest

from hangscope.sources.logs import scan_log
from hangscope.sources.logs.normalize import normalize, wrap_width

REAL = os.path.join(os.path.dirname(__file__), "..", "fixtures", "logs", "real")
WATCHDOG = sorted(p for p in glob.glob(os.path.join(REAL, "a_*.log"))
                  if b"Watchdog caught" in open(p, "rb").read())


# Wrapped copies whose events still differ (the verdict's kind and culprit hold; see docs).
WRAP_MISSES: dict[str, str] = {}


def _wrap(data: bytes, width: int) -> bytes:
    out = []
    for line in data.decode("utf-8", "replace").splitlines():
        while len(line) > width:
            out.append(line[:width])
            line = line[width:]
        out.append(line)
    return ("\n".join(out) + "\n").encode()


def _facts(events):  # type: ignore[no-untyped-def]
    return sorted((e.kind, e.rank, e.fields.get("seq"), e.fields.get("op")) for e in events
                  if e.kind in ("nccl_watchdog_timeout", "nccl_work_status"))


@pytest.mark.parametrize("width", [80, 120, 64, 90])
@pytest.mark.parametrize("path", WATCHDOG, ids=os.path.basename)
def test_wrapped_watchdog_logs_give_the_same_events(path: str, width: int, tmp_path) -> None:  # type: ignore[no-untyped-def]
    data = open(path, "rb").read()
    wrapped = tmp_path / "wrapped.log"
    wrapped.write_bytes(_wrap(data, width))
    same = _facts(scan_log(str(wrapped))) == _facts(scan_log(path))
    known = WRAP_MISSES.get(os.path.basename(path))
    if known is not None:
        assert not same, f"now the same: remove it from WRAP_MISSES ({known})"
        pytest.xfail(known)
    assert same


def test_identical_longest_lines_are_not_joined() -> None:
    line = b"INFO:root:Waiting in store based barrier for rank: 0 (world_size=8, worker_count=7)"
    data = b"\n".join([line, line.replace(b"0 (", b"1 ("), line.replace(b"0 (", b"2 (")]) + b"\n"
    fixed = normalize(data)
    assert fixed is None or fixed.data.count(b"\n") == 3


def test_cited_lines_are_the_original_ones(tmp_path) -> None:  # type: ignore[no-untyped-def]
    text = ("x" * 10 + "\n" + "[rank1]:[E ProcessGroupNCCL.cpp:563] [Rank 1] Watchdog caught collective "
            "operation timeout: WorkNCCL(SeqNum=96120, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
            "Timeout(ms)=600000) ran for 600017 milliseconds before timing out.\n")
    path = tmp_path / "p.log"
    path.write_bytes(_wrap(text.encode(), 80))
    (event,) = [e for e in scan_log(str(path)) if e.kind == "nccl_watchdog_timeout"]
    assert (event.line_no, event.fields["seq"], event.rank) == (2, 96120, 1)


def test_wrap_width_is_a_common_terminal_width() -> None:
    assert wrap_width([80, 80, 12]) == 80
    assert wrap_width([93, 93, 12]) is None
    assert wrap_width([93, 12, 40]) is None


def _lines(text: str) -> list[str]:
    return text.splitlines()


def test_an_uncommon_width_is_the_wrap_width_where_words_were_cut_at_it() -> None:
    # GIVEN two records hard-wrapped by a 93-column window (not a common width): each piece
    # but the last is exactly 93 long, cut inside a word
    record = ("[rank{r}]:[E ProcessGroupNCCL.cpp:475] [Rank {r}] Watchdog caught collective "
              "operation timeout: WorkNCCL(SeqNum=3, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
              "Timeout(ms)=600000) ran for 600888 milliseconds before timing out.")
    pieces = b"".join(_wrap(record.format(r=r).encode(), 93) for r in (1, 2))
    lines = _lines(pieces.decode())
    # THEN the width is found, and each record is one line again
    assert wrap_width([len(line) for line in lines], lines) == 93
    fixed = normalize(pieces)
    assert fixed is not None
    assert fixed.data.decode().splitlines() == [record.format(r=1), record.format(r=2)]


def test_an_uncommon_width_is_found_where_its_cuts_fall_beside_signs_and_blanks() -> None:
    # GIVEN frames and a warning hard-wrapped at 90 columns, every cut falling before a blank
    # or a sign (" _call_impl", '", line', " been used") rather than inside a word
    frames = [
        '  File "/usr/local/lib/python3.10/dist-packages/torch/nn/modules/module.py", line 1501, '
        'in _call_impl',
        '  File "/opt/conda/envs/train/lib/python3.10/site-packages/torch/utils/data/dataloader.py'
        '", line 1133, in _try_get_data',
        "huggingface/tokenizers: The current process just got forked, after parallelism has "
        "already been used. Disabling parallelism to avoid deadlocks...",
    ]
    pieces = b"".join(_wrap(line.encode(), 90) for line in frames)
    lines = _lines(pieces.decode())
    assert [len(line) for line in lines].count(90) == 3
    # THEN 90 is the width, and the lines are whole again
    assert wrap_width([len(line) for line in lines], lines) == 90
    fixed = normalize(pieces)
    assert fixed is not None and fixed.data.decode().splitlines() == frames
    # AND lines of that length followed by a rule, a capital or an indented row are not cuts
    whole = _lines("See https://pytorch.org/docs/stable/elastic/errors.html for how to read it\n"
                   "============================================================\n"
                   "See https://pytorch.org/docs/stable/elastic/errors.html for how to read it\n"
                   "Root Cause (first observed failure):\n"
                   "See https://pytorch.org/docs/stable/elastic/errors.html for how to read it\n"
                   "  host      : node-3\n")
    assert wrap_width([len(line) for line in whole], whole) is None


def test_equal_rows_and_equal_records_are_no_uncommon_wrap() -> None:
    # a table whose rows are all as long, and whole records that happen to be as long as each
    # other, are not a wrap at that width
    table = _lines("\n".join(f"|{n:>10}|{n * 2:>10}|{'float':>8}|{'sum':>6}|" for n in range(6)))
    assert wrap_width([len(line) for line in table], table) is None
    records = _lines("[80746] [rank0]: ... ran for 600060 milliseconds before timing out.\n"
                     "[80747] [rank4]: ... ran for 600067 milliseconds before timing out.\n"
                     "[80748] [rank0]: Exception detected by watchdog")
    assert wrap_width([len(line) for line in records], records) is None
    # one print per rank, alike but for its numbers; rows whose columns are padded with blanks
    prints = _lines("".join(f"Rank {r} tensor before allreduce: torch.Size([32768000]) 1.0\n"
                            for r in (7, 6, 4, 5)))
    assert wrap_width([len(line) for line in prints], prints) is None
    padded = _lines("".join(f"{k:<30}{v:>40}\n" for k, v in (("nccl version", "2.21.5x"),
                                                             ("cuda", "12.4abcd"),
                                                             ("world size", "16abcdef"))))
    assert wrap_width([len(line) for line in padded], padded) is None
    # one cut inside a word is not enough: a line may end where the next begins
    two = _lines("RuntimeError: DDP expects same model across all ranks, but ra\nnk 0 has 0")
    assert wrap_width([len(line) for line in two], two) is None



def test_a_narrow_wrap_is_found_from_indented_rows_tables_and_lines_cut_twice() -> None:
    # GIVEN pastes hard-wrapped by a 60-column window (not a common width)
    # a user's indented prints, each cut once inside a number: indentation is no table padding
    prints = "".join(f"        # Rank {r} tensor before allreduce: torch.Size([32768000]) 1.0\n"
                     for r in (7, 6, 0))
    # a table whose padded rows are longer than the window: each row goes on in a shorter piece
    table = "".join(f"  {n:>10}  {n // 4:>10}     float     sum      -1    {n / 7:11.3f}    "
                    f"{n / 9:6.2f}    0\n" for n in (1024, 2048, 4096))
    # one error line cut twice: the second piece is as long as the first
    twice = ("RuntimeError: DDP expects same model across all ranks, but Rank 1 has 212 params, "
             "while rank 0 has inconsistent 0 params.\n")
    # one cut inside a word and one right after a blank
    blank = ("RuntimeError: [Rank 1] Caught collective operation timeout: WorkNCCL(SeqNum=143, "
             "OpType=BROADCAST, TensorShape=[1], Timeout(ms)=3600000) ran for 3600089 "
             "milliseconds before timing out.\n")
    for text in (prints, table, twice, blank):
        wrapped = _wrap(text.encode(), 60)
        lines = _lines(wrapped.decode())
        # THEN the width is found, and every line is whole again
        assert wrap_width([len(line) for line in lines], lines) == 60, text
        fixed = normalize(wrapped)
        assert fixed is not None
        assert fixed.data.decode() == text

def test_srun_task_heads_become_ranks(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # GIVEN an srun -l paste: every line behind its task number
    watchdog = ("[E ProcessGroupNCCL.cpp:563] [Rank {r}] Watchdog caught collective operation "
                "timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
                "Timeout(ms)=600000) ran for 600017 milliseconds before timing out.")
    path = tmp_path / "srun.log"
    path.write_text("".join(f"{r}: step 3 loss 0.5\n{r}: {watchdog.format(r=r)}\n"
                            for r in (0, 2, 3)))
    # THEN each event is its task's rank, cited at its own line
    events = [e for e in scan_log(str(path)) if e.kind == "nccl_watchdog_timeout"]
    assert [(e.rank, e.line_no) for e in events] == [(0, 2), (2, 4), (3, 6)]


def test_a_few_numbered_lines_are_no_head() -> None:
    # GIVEN a log where some lines only happen to start with a number and a colon
    data = b"".join([b"1: first item\n", b"2: second item\n"] + [b"INFO plain line\n"] * 8)
    # THEN nothing is rewritten
    fixed = normalize(data)
    assert fixed is None or b"[rank" not in fixed.data


@pytest.mark.parametrize("head", ["E   ", "[pod/trainer-0/main] ", "trainer-1  | "])
def test_a_tools_head_on_every_line_is_peeled(head: str) -> None:
    data = "".join(f"{head}{line}\n" for line in ("[rank1]: a", "[rank0]: b", "", "[rank1]: c"))
    fixed = normalize(data.encode())
    assert fixed is not None and fixed.data == b"[rank1]: a\n[rank0]: b\n\n[rank1]: c\n"


WATCHDOG_RECORD = ("[rank2]:[E424 01:11:21.160832730 ProcessGroupNCCL.cpp:629] [Rank 2] Watchdog "
                   "caught collective operation timeout: WorkNCCL(SeqNum=4, OpType=BROADCAST, "
                   "NumelIn=112, NumelOut=112, Timeout(ms)=1800000) ran for 1800010 milliseconds "
                   "before timing out.")


def _cut(line: str, width: int) -> list[str]:
    return [line[i:i + width] for i in range(0, len(line), width)]


@pytest.mark.parametrize("head", ["E   ", "[pod/trainer-0/main] ", "trainer-1  | "])
def test_a_wrapped_paste_relayed_with_a_head_on_every_piece_is_rejoined(head: str) -> None:
    # GIVEN records hard-wrapped at 80 columns, and then a head put before every piece
    pieces = [p for rank in (2, 3, 5) for p in _cut(WATCHDOG_RECORD.replace("2", str(rank), 2), 80)]
    fixed = normalize("".join(f"{head}{p}\n" for p in pieces).encode())
    # THEN the width is the content's, and each record is one line again, without the heads
    assert fixed is not None
    lines = fixed.data.decode().splitlines()
    assert len(lines) == 3 and all("NumelOut=112, Timeout(ms)=1800000) ran for" in ln
                                   for ln in lines)
    assert not any(ln.startswith(head) for ln in lines)


def test_headed_lines_at_a_common_width_are_not_taken_for_wraps() -> None:
    # GIVEN short lines that each carry a relay's head, one of them exactly 80 columns with it
    head = "[pod/trainer-0/main] "
    body = ["rank 4 -> waiting on rank 5 (ncclCommFinalize for C_c_4567)",
            "rank 5 -> waiting on rank 1 (ncclCommFinalize for C_b_15)"]
    body[0] += "x" * (80 - len(head) - len(body[0]))
    fixed = normalize("".join(f"{head}{b}\n" for b in body).encode())
    # THEN the head says each is a line of its own
    assert fixed is not None and fixed.data.decode().splitlines() == body


def test_open_records_cut_at_an_uncommon_width_lose_no_blank() -> None:
    # GIVEN watchdog records that a tracker cut at 137 columns (not a terminal's width)
    pieces = [p for rank in (2, 3, 5) for p in _cut(WATCHDOG_RECORD.replace("2", str(rank), 2), 137)]
    fixed = normalize("".join(f"{p}\n" for p in pieces).encode())
    # THEN the cut words are joined as they were ("OpType", not "OpTy pe")
    assert fixed is not None
    assert fixed.data.decode().splitlines()[0] == WATCHDOG_RECORD


def test_a_blank_left_inside_a_watchdog_field_is_read_through(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # GIVEN a rejoined record with a blank where the paste was cut ("OpTy pe", "Numel Out")
    log = tmp_path / "rank.log"
    log.write_text(WATCHDOG_RECORD.replace("OpType", "OpTy pe").replace("NumelOut", "Numel Out")
                   + "\n")
    # THEN every field is still read
    (event,) = [e for e in scan_log(str(log)) if e.kind == "nccl_watchdog_timeout"]
    assert (event.rank, event.fields["seq"], event.fields["op"], event.fields["numel_out"]) == \
        (2, 4, "BROADCAST", 112)


def test_ray_relay_heads_mid_line_open_records_of_their_own() -> None:
    # GIVEN a Ray paste that lost its line breaks: every worker line's relay head is mid-line
    data = ("(raylet) The actor is dead because its worker process has died. "
            "(Actor pid=744, ip=10.1.59.27) [rank9]:[E416 13:21:26.967375581 "
            "ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective operation timeout "
            "(Actor pid=745, ip=10.1.59.28) [rank10]: still here\n").encode()
    fixed = normalize(data)
    # THEN each relayed line is a line again, citing the line it came from
    assert fixed is not None
    lines = fixed.data.decode().splitlines()
    assert [ln.split(")", 1)[0] for ln in lines] == \
        ["(raylet", "(Actor pid=744, ip=10.1.59.27", "(Actor pid=745, ip=10.1.59.28"]
    assert fixed.line_map == [1, 1, 1]


def test_a_padded_row_wrapped_at_the_width_keeps_the_next_row_next() -> None:
    # GIVEN a table whose rows are padded with blanks to 190 columns, then wrapped at 80 (each
    # row's padding goes on over a row of 80 blanks and one of 30)
    rows = ["  rank      : 0 (local_rank: 0)", "  exitcode  : -11 (pid: 3304209)"]
    wrapped = "".join(piece + "\n" for row in rows for piece in _cut(row.ljust(190), 80))
    fixed = normalize(wrapped.encode())
    # THEN the padding's wrapped rest is no blank line between the rows (whose indentation, on a
    # screen's rows, is the log's own)
    assert fixed is not None
    assert [ln.rstrip() for ln in fixed.data.decode().splitlines()] == rows


def test_an_nccl_line_cut_between_nccl_and_its_level_is_rejoined() -> None:
    # NCCL's "host:pid:tid [dev] NCCL INFO ..." wrapped at 80 right after "NCCL ": the level word
    # that starts the next row is the line's own, not a record of its own
    head = "2020-11-08 20:25:49 [1,0]<stdout>:az-scus-v100-2-worker-mgfopa:993:993 [3] NCCL "
    assert len(head) == 80
    paste = (head + "\nINFO NET/Socket : Using [0]ib0:172.16.1.10<0>\n"
             + head + "\nINFO Bootstrap : Using [0]ib0:172.16.1.10<0>\n")
    fixed = normalize(paste.encode())
    assert fixed is not None
    assert fixed.data.decode().splitlines() == [
        head + "INFO NET/Socket : Using [0]ib0:172.16.1.10<0>",
        head + "INFO Bootstrap : Using [0]ib0:172.16.1.10<0>"]


def test_a_watchdog_sentence_cut_inside_collective_is_read() -> None:
    # a terminal cut "collective" in two (the width unknown, the rest of the row padded)
    text = ("[rank7]:[E821 16:40:45.240894715 ProcessGroupNCCL.cpp:632] [Rank 7] Watchdog caught "
            "colle\nctive operation timeout: WorkNCCL(SeqNum=57, OpType=_ALLGATHER_BASE, "
            "NumelIn=6288000, NumelOut=50304000, Timeout(ms)=1800000) ran for 1800006 "
            "milliseconds before\n timing out." + " " * 40 + "\n")
    got = [e for e in scan_log("pasted.log", data=text.encode())
           if e.kind == "nccl_watchdog_timeout"]
    assert [(e.rank, e.fields["seq"], e.fields["op"]) for e in got] == [(7, 57, "_ALLGATHER_BASE")]


def test_a_detail_report_broken_into_lines_is_one_record() -> None:
    text = ("RuntimeError: Detected mismatch between collectives on ranks. \n"
            "Rank 7 is running collective: CollectiveFingerPrint(SequenceNumber=18, "
            "OpType=BROADCAST, ...)\n"
            "but Rank 0 is running collective: CollectiveFingerPrint(SequenceNumber=30, "
            "OpType=BROADCAST, ...)\n")
    got = [e for e in scan_log("pasted.log", data=text.encode())
           if e.kind == "collective_fingerprint_mismatch"]
    assert [(e.fields["rank_a"], e.fields["seq_a"], e.fields["rank_b"], e.fields["seq_b"])
            for e in got] == [(7, 18, 0, 30)]


def test_a_bars_unfilled_blanks_wrapped_at_80_are_the_bar_not_padding() -> None:
    # tqdm at 0%: its empty bar is a run of blanks, then "| 0/994 [...]"; a terminal cut it at 80
    bar = "  0%|" + " " * 300 + "| 0/994 [00:00<?, ?it/s]"
    text = "header line\n" + "".join(bar[i:i + 80] + "\n" for i in range(0, len(bar), 80))
    fixed = normalize(text.encode())
    assert fixed is not None
    assert bar in fixed.data.decode().split("\n")


def test_a_traceback_frame_line_as_long_as_a_common_width_is_whole() -> None:
    frame = '  File "/lib/torch/utils/data/dataloader.py", line 942, in _shutdown_workers'
    frame = frame.replace("/lib", "/" + "l" * (80 - len(frame) + 3), 1)
    assert len(frame) == 80
    text = "Traceback (most recent call last):\n" + frame + "\n    w.join()\n" + "x" * 80 + "\n"
    fixed = normalize(text.encode())
    lines = (fixed.data.decode() if fixed is not None else text).split("\n")
    assert frame in lines and "    w.join()" in lines


def test_a_wrapped_piece_that_starts_with_a_number_and_a_colon_continues_its_line() -> None:
    # GIVEN an mpirun paste whose what() line was hard-wrapped at 132 right before "2: out of
    # memory" (the piece looks like srun -l's task label; no other line carries one)
    line = ("[1,1]<stderr>:  what():  tensorflow_recommenders_addons/dynamic_embedding/core/"
            "kernels/cuckoo_hashtable_op_gpu.cu.cc:413: CUDA error 2: out of memory")
    paste = "\n".join(["[1,1]<stderr>:terminate called after throwing an instance of 'x'",
                       *_cut(line, 132), "[1,1]<stderr>:[host:87519] *** Process received "
                       "signal ***"]) + "\n"
    fixed = normalize(paste.encode())
    # THEN the what() line is whole again, and reads as no task 2's line
    assert fixed is not None and line in fixed.data.decode().splitlines()
    # AND in an srun -l paste, where other lines carry a label, a labelled piece still starts
    # a record of its own
    srun = "\n".join(["0: " + "x" * 129, "1: starting", "2: out of memory"]) + "\n"
    out = normalize(srun.encode())
    lines = (out.data if out is not None else srun.encode()).decode().splitlines()
    assert len(lines) == 3


def _pieces(lines: list[str], width: int) -> bytes:
    return ("\n".join(piece for line in lines for piece in _cut(line, width)) + "\n").encode()


REAL = os.path.join(os.path.dirname(__file__), "..", "fixtures", "logs", "real")


@pytest.mark.parametrize(("name", "width"), [
    # Horovod's stall report: tensor names that repeat, so two pieces from inside one line open
    # with the same eight characters
    ("g_horovod_3950_missing_ranks_0_1_broadcast", 132),
    # the same report whose last piece is the list's tail "...]" (no paster's elision)
    ("g_automl_563_horovod_stalled_ranks_broadcast_vs_allreduce", 100),
])
def test_real_lines_wrapped_at_a_common_width_are_whole_again(name: str, width: int) -> None:
    # GIVEN a real log hard-wrapped at a common width
    with open(os.path.join(REAL, name + ".log"), encoding="utf-8") as f:
        lines = f.read().splitlines()
    fixed = normalize(_pieces(lines, width))
    # THEN every line is whole again
    assert fixed is not None
    assert fixed.data.decode().splitlines() == [line.rstrip("\n") for line in lines]


def test_two_padded_rows_of_one_print_stay_two_lines_after_a_joined_bar() -> None:
    # GIVEN rows padded to the width (120) after a progress bar that is exactly as wide
    rows = [f"{{'loss': 0.{n}, 'epoch': {n}.0}}".ljust(120) for n in (1, 2, 3)]
    data = ("\n".join(["100%|" + "#" * 115, *rows, "done"]) + "\n").encode()
    fixed = normalize(data)
    lines = (fixed.data if fixed is not None else data).decode().splitlines()
    # THEN each row is a line of its own
    assert sum(line.startswith("{'loss'") for line in lines) == 2


def test_a_relay_head_cut_by_the_wrap_still_opens_its_record() -> None:
    # GIVEN a progress bar with a rank's C++ log line glued to it, wrapped at 100 inside the head
    glued = ("Tokenizing Prompts (num_proc=64):  92%|#########| 328986/359152 [29:58<12:05, 41.59 "
             "examples/s][rank1]:[W516 14:34:56.853490829 socket.cpp:464] [c10d] waitForInput: "
             "poll for socket SocketImpl(fd=79) returned 0, likely a timeout")
    assert glued.index("[rank1]") < 100 < glued.index("[rank1]") + 8
    fixed = normalize(_pieces([glued, "[rank1]: Traceback (most recent call last):"], 100))
    # THEN the glued line is split where the head begins
    assert fixed is not None
    assert any(line.startswith("[rank1]:[W516") for line in fixed.data.decode().splitlines())


def test_a_line_flattened_by_a_tracker_is_rebuilt_whole() -> None:
    # GIVEN a line of 900 characters and more (a paste a tracker ran together) wrapped at 100
    line = (" ".join(f"step{n}:ok" for n in range(80)) + " subprocess.CalledProcessError: "
            "Command '['python', '-u', "
            "'tools/train_net.py', '--local_rank=0']' died with <Signals.SIGSEGV: 11>.")
    assert len(line) > 8 * 100  # more pieces than a record still open is joined from
    fixed = normalize(_pieces([line, "done"], 100))
    # THEN it is one line again
    assert fixed is not None and line in fixed.data.decode().splitlines()


def test_a_rule_as_long_as_a_narrow_width_stays_its_own_line() -> None:
    # GIVEN torchelastic's failure table (its rules are 60 across) in a paste wrapped at 60,
    # beside a long line cut twice that makes 60 the wrap width
    table = ("torch.distributed.elastic.multiprocessing.errors.ChildFailedError: train.py FAILED "
             "on the node, see the root cause below for the failure\n"
             + "-" * 60 + "\nFailures:\n  <NO_OTHER_FAILURES>\n" + "-" * 60
             + "\nRoot Cause (first observed failure):\n[0]:\n  rank      : 3 (local_rank: 3)\n"
             + "=" * 60 + "\n")
    fixed = normalize(_wrap(table.encode(), 60))
    # THEN each rule is its own line again, not glued to the heading after it
    assert fixed is not None and fixed.data.decode() == table


def test_a_line_at_a_common_width_before_a_bracketed_time_is_no_wrap() -> None:
    # GIVEN a job's own log whose one long record happens to be 80 characters long, each record
    # opening with the logger's bracketed time of day
    lines = ["[07:04:38][rank0] epoch 0 batch 10/45 loss 6.0309",
             "[07:04:39][rank1] epoch 0 batch 12: OOM with padded length 60014, skipping batch",
             "[07:04:40][rank0] epoch 0 batch 20/45 loss 5.7541"]
    assert len(lines[1]) == 80
    # THEN no record is joined to the next
    fixed = normalize("\n".join(lines).encode())
    assert fixed is None or fixed.data.decode().splitlines() == lines


_TABLE = ["PGID   | Process Group Desc        | Op Type    | Size                             "
          "| Dtype    | Missing Ranks",
          "74     | EXPERT_MODEL_PARALLEL_GROUP | nccl:all_to_all | 4096x5120                 "
          "            | BFloat16 | 12,14",
          "42     | TENSOR_MODEL_PARALLEL_GROUP | nccl:_all_gather_base | 4096x1x5120           "
          "                  | BFloat16 | 14",
          *(f"{pg:<6} | DATA_PARALLEL_GROUP_{pg} | nccl:_reduce_scatter_base | {pg * 512}x4096     "
            f"                      | Float | 3,{pg % 8}" for pg in range(100, 108))]


@pytest.mark.parametrize("width", [80, 100])
def test_a_pipe_tables_row_cut_before_a_column_bar_is_rejoined(width: int) -> None:
    # GIVEN a tool's pipe table hard-wrapped so that pieces start "word | " or "16 | 14" (the
    # shape of docker compose's "service  | " head)
    pieces = [p for row in _TABLE for p in _cut(row, width)]
    assert any(p[:1].isalnum() and " | " in p[:12] for p in pieces[1:])
    fixed = normalize("".join(f"{p}\n" for p in pieces).encode())
    # THEN each row is one line again
    assert fixed is not None and fixed.data.decode().splitlines() == _TABLE


def test_compose_heads_still_start_their_records_at_the_wrap_width() -> None:
    # GIVEN a compose log whose lines all carry a service's head, one of them 80 columns long
    first = "trainer_1  | [rank0]: step 10 loss 1.25 "
    first += "x" * (80 - len(first))
    lines = [first, "trainer_2  | [rank1]: step 10 loss 1.27", "trainer_1  | [rank0]: step 11"]
    fixed = normalize("".join(f"{ln}\n" for ln in lines * 3).encode())
    # THEN no line is joined to the next: each head starts a record of its own
    data = (fixed.data if fixed is not None else "".join(f"{ln}\n" for ln in lines * 3).encode())
    assert not any("trainer_1" in ln and "trainer_2" in ln for ln in data.decode().splitlines())
