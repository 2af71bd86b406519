# ruff: noqa: E501  (the patterns quote the words real software writes)
"""Warnings known to be harmless: a log that holds nothing else says the job is not in trouble.

People paste a warning and ask whether it is why their job hangs. Some warnings are printed by
every healthy run of a setup and change nothing about it; a log made of them alone (with the
launcher's banner and their own continuation lines) shows no fault. Each is listed with why it is
harmless, in the software's own terms:

    huggingface/tokenizers: The current process just got forked, after parallelism has already been used. Disabling parallelism to avoid deadlocks...
        (tokenizers turns its own thread pool off in the forked child: the warning says it
        avoided the deadlock; it costs tokenizer speed, nothing else)
    [PG ID 0 PG GUID 0 Rank 0]  using GPU 0 as device used by this process is currently unknown. This can potentially cause a hang if this rank to GPU mapping is incorrect.
    [PG ID 0 PG GUID 0 Rank 1] Guessing device ID based on global rank. This can cause a hang if rank to GPU mapping is heterogeneous.
    No device id is provided via `init_process_group` or `barrier `. Using the current device set by the user.
        (ProcessGroupNCCL guessing the device from the rank: a hang only where the guess is
        wrong, which the job's own later collectives would show)
    Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, ...
        (torchrun's start-up banner)
    Grad strides do not match bucket view strides. ...    (DDP: a copy per step, speed only)
    find_unused_parameters=True was specified in DDP constructor, but did not find any unused parameters ...
        (DDP: an extra graph traversal per step, speed only)
    Environment variable NCCL_BLOCKING_WAIT is deprecated; use TORCH_NCCL_BLOCKING_WAIT instead
        (torch reads the old name too)
    WARNING: destroy_process_group() was not called before program exit, which can leak resources.
    WARNING: process group has NOT been destroyed before we destruct ProcessGroupNCCL. ...
        (ProcessGroupNCCL's destructor at the end of a program that exited: the job finished)
    [WARNING] [comm.py:152:init_deepspeed_backend] NCCL backend in DeepSpeed not yet implemented
        (DeepSpeed then uses torch.distributed's NCCL backend; its "cdb=None" INFO line follows)
    UserWarning: PyTorch is not compiled with NCCL support
        (torch.cuda.nccl's import-time warning on builds without NCCL, Windows': a job on gloo
        never uses it)
    The module torch.distributed.launch is deprecated and will be removed in future. Use torchrun.
    --use_env is deprecated and will be removed in future releases.
        (torch.distributed.launch's notice on every start since torch 1.9: it runs as before)

``benign_only`` event, one per file whose every non-blank line (the whole file: its tail is all
of it) is one of these warnings, its continuation (indented, or the warning's own follow-up
lines), launcher boilerplate, the user's shell prompt, a progress bar at 0%, or a logger's routine
INFO or DEBUG records (no word of a fault, a wait or a retry in them), and which holds at least
one of them. fields: ``warnings`` (the
names, comma-joined), ``count``. ``analysis/log_health.py`` (rule ``known-benign``) reads a job
whose every log is such a file as showing no fault.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from hangscope.model import LogEvent
from hangscope.sources.logs.common import Line, make_event, parse_line
from hangscope.sources.logs.tail import LogicalTail

KIND = "benign_only"
WARNINGS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("tokenizers-fork", re.compile(
        r"huggingface/tokenizers: The current process just got forked, after parallelism has already been used")),
    ("device-unknown", re.compile(
        r"(?i)using (?:best-guess )?GPU \d+ (?:as device|to perform barrier as devices) used by this process|"
        r"Guessing device ID based on global rank|No device id is provided via `init_process_group` or `barrier ?`")),
    ("ddp-grad-strides", re.compile(r"Grad strides do not match bucket view strides")),
    ("ddp-unused-parameters", re.compile(
        r"find_unused_parameters=True was specified in DDP constructor, but did not find any unused parameters")),
    ("deprecated-env", re.compile(
        r"Environment variable (?:NCCL_\w+|TORCH_\w+) is deprecated; use (?:TORCH_)?\w+ instead")),
    ("pg-not-destroyed", re.compile(
        r"destroy_process_group\(\) was not called before program exit|"
        r"process group has NOT been destroyed before we destruct ProcessGroupNCCL")),
    ("deepspeed-nccl-backend", re.compile(r"NCCL backend in DeepSpeed not yet implemented")),
    ("no-nccl-build", re.compile(r"PyTorch is not compiled with NCCL support")),
    ("launch-deprecated", re.compile(
        r"The module torch\.distributed\.launch is deprecated|"
        r"--use[_-]env is deprecated and will be removed in future releases")),
)
# Lines around the warnings that say nothing: their own follow-up lines, torchrun's banner,
# Python's warnings.warn echo
_FOLLOW = re.compile(
    r"^(?:To disable this warning, you can either:|- Avoid using `tokenizers` before the fork if possible|"
    r"- Explicitly set the environment variable TOKENIZERS_PARALLELISM=|"
    r"\*{5,}\s*$|Setting OMP_NUM_THREADS environment variable for each process to be 1 in default|"
    r"warnings\.warn\(|This can (?:potentially )?cause a hang if|You can (?:s?pecify|specify) device_id|"
    r"Specify device_ids? in barrier\(\)|or call init_process_group\(\) with a device_id|"
    r"\[INFO\] \[comm\.py:\d+:\w+\]|"
    # torch.distributed.launch's deprecation notice goes on over several lines
    r"and will be removed in future\. Use torchrun|Note that --use[_-]env is set by default in torchrun|"
    r"If your script expects `--local[_-]rank` argument to be set|"
    r"change it to read from `os\.environ\[.LOCAL_RANK.\]` instead|"
    r"https://pytorch\.org/docs/stable/distributed\.html#launch-utility|further instructions\s*$)")
# Lines that say nothing of the job's health: the user's own shell prompt and command
# (``root@host:~/dir# python train.py``, ``$ torchrun ...``), a progress bar that has not moved
# (``  0%|          | 0/100 [00:00<?, ?it/s]``)
_NEUTRAL = re.compile(
    r"^(?:\(\S+\) )?(?:[\w.\-]+@[\w.\-]+(?::\S*)?\s?[#$%]|\$) \S|"
    r"^[^|]{0,60}\b0%\|[\s\u2591\u2588\u258f\u258e\u258d\u258c\u258b\u258a\u2589#]*\|?[^|]*$")
# a warning's sentence carried over to the next line by a paste wrapped at a width (the break
# mid-word or between words: the line before is as long as the paste's longest, or this one goes
# on in lower case or with the warning's "(function operator())" trailer), unless the carried
# line speaks of a fault
_CARRIED = re.compile(r"^(?:[a-z]|\(function )")
_MIN_WRAP = 60  # narrower "widths" are short lines, not a terminal's
_WRAP_SLACK = 8  # a word wrap ends a line up to a word short of the width
_FAULT = re.compile(r"(?i)error|fail|time[ds]? ?out|exception|traceback|killed|abort|hang|stuck|"
                    r"waiting|retry|retrying")
# detectron2's logger head ("[03/07 20:19:02 detectron2]: Starting training from iteration 0"),
# which carries no level: its records are INFO unless they say otherwise ("WRN", "ERROR")
_INFO_HEAD = re.compile(r"^\[\d{2}/\d{2} \d{2}:\d{2}:\d{2} [\w.]+\]: "
                        # Python logging's default format (``INFO:torch.distributed.run:...``)
                        r"|^(?:INFO|DEBUG):[\w.]+:")
# a glog head a terminal cut from its message (``[W1003 20:49:10.123654124``)
_HEAD_ONLY = re.compile(r"^\[?[IWEF]\d{4} \d{2}:\d{2}:\d{2}(?:\.\d+)?(?: +\d+)?\]?$")


def scan_benign(path: str, tail: LogicalTail | None) -> list[LogEvent]:
    """One ``benign_only`` event where the whole file is known-harmless warnings, else none."""
    if tail is None or tail.first_line != 1:
        return []  # only part of the file was read: the rest may say anything
    names: list[str] = []
    after_warning = False
    last = None
    # the width a paste was hard-wrapped at: its longest record's first line, where that is a
    # terminal's width (the records are parsed one by one after: most logs stop at the first)
    width = max((len(tail.text(index)) for index in range(len(tail.lines))
                 if index == 0 or index not in tail.skip), default=0)
    previous = ""
    for line, text in _records(tail):
        body = line.body.strip()
        cut = width >= _MIN_WRAP and len(previous) >= width - _WRAP_SLACK
        previous = text
        if not body or _HEAD_ONLY.match(body):
            continue
        name = next((n for n, pattern in WARNINGS if pattern.search(body)), None)
        if name is not None:
            names.append(name)
            after_warning, last = True, line
        elif _FOLLOW.search(body) or _NEUTRAL.match(body) or (after_warning and (text[:1].isspace() or (
                cut or _CARRIED.match(body)) and not _FAULT.search(body))):
            continue  # the warning's own continuation (indented, or carried over), or a banner
        elif (line.severity in ("info", "debug") or _INFO_HEAD.match(body)) \
                and not _FAULT.search(body):
            continue  # a logger's routine INFO or DEBUG record (data set up, training started)
        else:
            return []
    if last is None:
        return []
    return [make_event(KIND, last, tail.ctx, "info",
                       {"warnings": ",".join(dict.fromkeys(names)), "count": len(names)})]


def _records(tail: LogicalTail) -> Iterator[tuple[Line, str]]:
    """Each logical line, prefix-parsed, with the continuation lines the tail marked (a record a
    terminal wrapped where nothing was rebuilt) joined to it; and its raw text."""
    pending: tuple[int, str, list[str]] | None = None
    for index in range(len(tail.lines)):
        text = tail.text(index)
        if index in tail.skip and pending is not None:
            pending[2].append(text.strip())
            continue
        if pending is not None:
            yield _joined(tail, pending)
        pending = (index, text, [])
    if pending is not None:
        yield _joined(tail, pending)


def _joined(tail: LogicalTail, record: tuple[int, str, list[str]]) -> tuple[Line, str]:
    index, text, more = record
    line = parse_line(" ".join([text, *more]) if more else text, tail.line_no(index), tail.ctx)
    return line, text
