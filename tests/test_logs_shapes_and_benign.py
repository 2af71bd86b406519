"""Rules written after blind batch 24's first look, each in the general form the software's own
wording allows (the lines are the formats Accelerate, DeepSpeed, vLLM, torch_memory_saver and
detectron2 print; none is a corpus log): Accelerate's list of input shapes names the odd process;
a quoted paste reads as the paste; a warning's wrapped continuation and a logger's routine INFO
records keep a log of harmless warnings harmless; a line that is a wait running out is a wait
whatever else it says; an OOM beside one rank's lone timeout is the cause, not rank 0's prior;
DeepSpeed's pipeline engine's step lines are progress."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from _logs_helpers import kind_and_culprits, verdict_of


def _shape_report(shapes: list[str], prefix: str = "[rank3]: ") -> str:
    """Accelerate's verify_operation error (accelerate/utils/operations.py) as a rank prints it."""
    lines = ["accelerate.utils.operations.DistributedOperationException: Cannot apply desired "
             "operation due to shape mismatches. All shapes across devices must be valid.", "",
             "Operation: `accelerate.utils.operations.gather`", "Input shapes:"]
    lines += [f"  - Process {i}: {shape}" for i, shape in enumerate(shapes)]
    return "".join(f"{prefix}{line}\n" for line in lines)


# --- Accelerate's shape table -------------------------------------------------------------------

def test_the_one_process_whose_shape_differs_from_all_others_is_named(tmp_path: Path) -> None:
    verdict = verdict_of(tmp_path, _shape_report(["[1024]"] + ["[2048]"] * 7))
    root = verdict.root
    assert root is not None and kind_and_culprits(verdict) == ("collective_mismatch", [0])
    assert root.measures["rule"] == "ranks-disagree"
    assert "rank 0 with [1024] where the other 7 processes have [2048]" in root.summary
    assert verdict.world_size == 8  # the list names every process, not only the printing rank


@pytest.mark.parametrize("shapes", [
    ["[2, 350, 32256]", "[2, 658, 32256]", "[2, 617, 32256]", "[2, 594, 32256]"],  # all differ
    ["[1, 5]", "[1, 2, 5]"],  # two processes: neither side is the odd one
    ["[4]", "[4]", "[8]", "[8]"],  # two even halves
])
def test_shapes_with_no_clear_odd_one_name_no_culprit(tmp_path: Path, shapes: list[str]) -> None:
    verdict = verdict_of(tmp_path, _shape_report(shapes))
    assert kind_and_culprits(verdict) == ("collective_mismatch", [])
    assert "which rank is odd the check does not say" in verdict.root.summary


def test_a_shape_table_pasted_as_a_markdown_quote_reads_the_same(tmp_path: Path) -> None:
    quoted = "".join(f"> {line}\n" for line in
                     _shape_report(["[1024]"] + ["[2048]"] * 7).splitlines())
    assert kind_and_culprits(verdict_of(tmp_path, quoted)) == ("collective_mismatch", [0])


def test_accelerates_older_wording_alone_is_a_mismatch(tmp_path: Path) -> None:
    line = ("accelerate.utils.operations.DistributedOperationException: Impossible to apply the "
            "desired operation due to inadequate shapes. All shapes on the devices must be "
            "valid.\n")
    assert kind_and_culprits(verdict_of(tmp_path, line)) == ("collective_mismatch", [])


# --- harmless warnings ---------------------------------------------------------------------------

_UNUSED = ("[W reducer.cpp:1050] Warning: find_unused_parameters=True was specified in DDP "
           "constructor, but did not find any unused parameters. This flag results in an extra "
           "traversal of the autograd graph every iteration, which can adversely affect "
           "performance. If your model indeed never has any unused parameters, consider turning "
           "this flag off. (function operator())")


def _wrap(text: str, width: int) -> str:
    return "".join(text[i:i + width] + "\n" for i in range(0, len(text), width))


def test_a_harmless_warning_wrapped_mid_word_is_still_harmless(tmp_path: Path) -> None:
    verdict = verdict_of(tmp_path, _wrap(_UNUSED, 100))
    assert verdict.status.value == "healthy", verdict.findings
    assert any(gap.startswith("rule known-benign") for gap in verdict.evidence_gaps)
    # wrapped between words at a width no terminal has, a carried line starting a sentence
    (tmp_path / "words").mkdir()
    words = "".join(line + "\n" for line in textwrap.wrap(_UNUSED, 131))
    assert words.splitlines()[1].startswith("This flag")
    assert verdict_of(tmp_path / "words", words).status.value == "healthy"
    # a carried-over line that speaks of a fault is not the warning's
    (tmp_path / "fault").mkdir()
    verdict = verdict_of(tmp_path / "fault", _wrap(_UNUSED, 100) + "connection failed, retrying\n")
    assert verdict.status.value != "healthy"


def test_routine_info_records_beside_a_harmless_warning_are_no_fault(tmp_path: Path) -> None:
    head = ("[03/07 20:19:00 d2.data.common]: Serialized dataset takes 424.32 MiB\n"
            "[03/07 20:19:02 detectron2]: Starting training from iteration 0\n")
    verdict = verdict_of(tmp_path, head + _UNUSED + "\n" + _UNUSED + "\n")
    assert verdict.status.value == "healthy", verdict.findings
    # an INFO record that says it waits is not routine
    (tmp_path / "wait").mkdir()
    waiting = head + "[03/07 20:19:05 detectron2]: waiting for rank 3 to join\n" + _UNUSED + "\n"
    assert verdict_of(tmp_path / "wait", waiting).status.value != "healthy"


# --- a wait's own line, and a cause beside a lone timeout -----------------------------------------

def test_an_exception_line_that_is_a_gloo_wait_running_out_is_a_wait(tmp_path: Path) -> None:
    # vLLM's worker loop relays the exception of its gloo recv (multiproc_worker_utils.py)
    line = ("(VllmWorkerProcess pid=73) ERROR 06-13 01:30:49 multiproc_worker_utils.py:225] "
            "Exception in worker VllmWorkerProcess while processing method "
            "start_worker_execution_loop: [../third_party/gloo/gloo/transport/tcp/"
            "unbound_buffer.cc:81] Timed out waiting 1800000ms for recv operation to complete\n")
    verdict = verdict_of(tmp_path, line)
    assert kind_and_culprits(verdict) == ("missing_rank", [])


def test_an_oom_beside_one_ranks_lone_timeout_is_the_cause(tmp_path: Path) -> None:
    # one Ray worker's cuMemCreate fails (code 2, out of memory); another's watchdog times out
    text = ("(WorkerDict pid=60511) [torch_memory_saver.cpp] CUresult error  result=2 "
            "file=csrc/torch_memory_saver.cpp func=cu_mem_create line=103\n"
            "(WorkerDict pid=60510) [rank3]:[E509 17:37:47.665078263 ProcessGroupNCCL.cpp:629] "
            "[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1420, "
            "OpType=COALESCED, NumelIn=48660480, NumelOut=778567680, Timeout(ms)=1800000) ran "
            "for 1800033 milliseconds before timing out.\n")
    verdict = verdict_of(tmp_path, text)
    assert verdict.root is not None and verdict.root.kind.value == "rank_oom"
    assert verdict.root.measures["rule"] == "cause-over-symptom"
    # the lone timeout alone still reads rank 0 as the likeliest missing rank
    (tmp_path / "alone").mkdir()
    alone = verdict_of(tmp_path / "alone", text.splitlines(keepends=True)[1])
    assert kind_and_culprits(alone) == ("missing_rank", [0])


# --- DeepSpeed's pipeline engine's progress -------------------------------------------------------

def test_deepspeed_pipeline_step_lines_show_training_move(tmp_path: Path) -> None:
    text = ("steps: 20 loss: 4.6178 iter time (s): 0.994 samples/sec: 257.601\n"
            "steps: 30 loss: 4.5012 iter time (s): 0.991 samples/sec: 258.310\n")
    verdict = verdict_of(tmp_path, text)
    assert verdict.status.value == "healthy", verdict.findings
    # a config's "total steps: N" is no step line
    (tmp_path / "config").mkdir()
    config = "total steps: 1000 warmup\nsteps: 1000\n"
    assert verdict_of(tmp_path / "config", config).status.value != "healthy"


def test_a_timers_milliseconds_are_no_step_count(tmp_path: Path) -> None:
    # DeepSpeed's wall-clock breakdown ("step: 72.82" ms) twice at other values: no progress
    timers = "".join(f"[Rank 0] rank=0 time (ms) | forward: 27.41 | step: {ms}\n"
                     for ms in ("72.82", "80.15"))
    assert verdict_of(tmp_path, timers).status.value != "healthy"


def test_a_progress_bar_hard_wrapped_at_80_columns_still_moves(tmp_path: Path) -> None:
    # tqdm's bar (its blocks are three bytes each) cut at 80 characters by a terminal
    bars = "".join(f"  {n // 4}%|{'█' * (n // 4)}{' ' * (88 - n // 4)}| {n}/345 [00:07<06:50,"
                   f"  1.23s/it]\n" for n in (12, 13, 14))
    wrapped = "".join(line[i:i + 80] + "\n" for line in bars.splitlines()
                      for i in range(0, len(line), 80))
    assert max(len(line) for line in wrapped.splitlines()) == 80
    assert verdict_of(tmp_path, wrapped).status.value == "healthy"


def test_a_cut_traceback_in_the_dataloaders_worker_join_is_a_dataloader_stall(
        tmp_path: Path) -> None:
    # stopped by hand while the DataLoader joins a worker that never exits (_shutdown_workers);
    # the frame line is 110 characters, a common wrap width, and is still no wrapped piece
    frame = ('  File "/usr/local/lib/python3.6/dist-packages/torch/utils/data/dataloader.py", '
             'line 942, in _shutdown_workers')
    frame = frame.replace("/usr/local", "/usr/loca" + "l" * (110 - len(frame) + 1), 1)
    assert len(frame) == 110
    text = "\n".join([
        "Traceback (most recent call last):",
        '  File "train.py", line 286, in <module>',
        "    for j, batch in enumerate(dataloader):",
        '  File "/usr/lib/python3/dist-packages/torch/utils/data/dataloader.py", line 830, in '
        "_next_data", "    self._shutdown_workers()", frame, "    w.join()",
        '  File "/usr/lib/python3.6/multiprocessing/popen_fork.py", line 28, in poll',
        "    pid, sts = os.waitpid(self.pid, flag)", ""])
    verdict = verdict_of(tmp_path, text)
    assert kind_and_culprits(verdict) == ("dataloader_stall", [])
    assert "to exit" in verdict.root.summary + " ".join(e.detail for e in verdict.root.evidence)


def test_debug_records_beside_a_harmless_warning_are_no_fault(tmp_path: Path) -> None:
    text = ("[rank1]:[W519 17:03:22.928749665 ProcessGroupNCCL.cpp:4561] [PG ID 0 PG GUID 0 Rank "
            "1]  using GPU 1 to perform barrier as devices used by this process are currently "
            "unknown. This can potentially cause a hang if this rank to GPU mapping is incorrect.\n"
            "[2025-05-19 17:03:24,947] [DEBUG] [axolotl.utils.models.load_tokenizer:461] "
            "[PID:99566] [RANK:0] EOS: 128001 / <|end_of_text|>\n")
    assert verdict_of(tmp_path, text).status.value == "healthy"
