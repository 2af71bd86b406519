"""Metamorphic: a real log pasted another way (hard-wrapped by a terminal, with CRLF and colours,
behind another launcher's prefix, its ranks' lines interleaved differently) is the same evidence,
so it must give the same first finding's kind and culprits as the log as posted.

The relations hold by construction of the variants, not by a label: each variant is compared with
the verdict of the original, whatever that is. Variants whose verdict still differs are listed in
``DIFFERS`` with what was seen; they are still run, and one that now agrees fails until it is
taken off the list.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest

from hangscope.analysis.engine import analyze
from hangscope.options import LoadOptions
from hangscope.sources.load import load_paths

REAL = Path(__file__).resolve().parent.parent / "fixtures" / "logs" / "real"
LOGS = sorted(REAL.glob("*.log"))

# ``[rank3]:`` as torch >= 2.2 prefixes a worker's lines, and torchrun's ``[default3]:``
_RANK_PREFIX = re.compile(r"^\[(?:rank|default)(\d+)\]:")


def _wrap(width: int) -> Callable[[str], str]:
    def wrap(text: str) -> str:
        out = []
        for line in text.splitlines():
            while len(line) > width:
                out.append(line[:width])
                line = line[width:]
            out.append(line)
        return "\n".join(out) + "\n"
    return wrap


def _crlf_ansi(text: str) -> str:
    coloured = re.sub(r"\b(ERROR|WARNING|WARN|Error)\b", "\x1b[31m\\1\x1b[0m", text)
    return coloured.replace("\n", "\r\n")


def _rank_prefix(style: Callable[[str], str]) -> Callable[[str], str]:
    """Each ``[rankN]:`` / ``[defaultN]:`` head rewritten as another launcher writes it; only for
    logs whose lines nearly all carry one (a launcher prefixes every line it relays: a log whose
    other lines have no head was not relayed by one)."""
    def rewrite(text: str) -> str:
        lines = [line for line in text.splitlines() if line.strip()]
        if sum(1 for line in lines if _RANK_PREFIX.match(line)) < 0.8 * len(lines):
            return text
        return "".join(_RANK_PREFIX.sub(lambda m: style(m.group(1)), line)
                       for line in text.splitlines(keepends=True))
    return rewrite


def _interleave(text: str) -> str:
    """The ranks' records in another order across ranks, each rank's own order kept: round-robin
    by rank, as a launcher's tee may deliver them. A record is a prefixed line with the lines
    that continue it (a paste's hard-wrapped pieces carry no prefix): they move together."""
    lines = text.splitlines(keepends=True)
    units: list[tuple[str | None, str]] = []  # (rank or None, the record's text)
    for line in lines:
        m = _RANK_PREFIX.match(line)
        if m:
            units.append((m.group(1), line))
        elif units and units[-1][0] is not None and line.strip():
            units[-1] = (units[-1][0], units[-1][1] + line)  # a wrapped piece of that record
        else:
            units.append((None, line))
    by_rank: dict[str, list[str]] = {}
    for rank, unit in units:
        if rank is not None:
            by_rank.setdefault(rank, []).append(unit)
    queues = {rank: list(reversed(items)) for rank, items in by_rank.items()}
    ranks = sorted(queues, key=int)
    first = next((r for r, _ in units if r is not None), None)
    if ranks and ranks[0] == first:
        ranks = ranks[1:] + ranks[:1]  # another rank first than in the original
    out, turn = [], 0
    for rank, unit in units:
        if rank is None:
            out.append(unit)
            continue
        while not queues[ranks[turn % len(ranks)]]:
            turn += 1
        out.append(queues[ranks[turn % len(ranks)]].pop())
        turn += 1
    return "".join(out)


def _screen(width: int) -> Callable[[str], str]:
    """As a terminal ``width`` columns wide shows it, copied with its rows' padding."""
    def copy(text: str) -> str:
        return "".join(row.ljust(width) + "\n" for row in _wrap(width)(text).splitlines())
    return copy


def _stamped(stamp: Callable[[int], str]) -> Callable[[str], str]:
    """Every line behind a collector's timestamp (line ``i`` stamped ``stamp(i)``)."""
    def collect(text: str) -> str:
        return "".join(stamp(i) + line for i, line in enumerate(text.splitlines(keepends=True)))
    return collect


def _numbered(text: str) -> str:
    lines = text.splitlines(keepends=True)
    if sum(1 for line in lines if line.strip()) < 3:
        return text
    return "".join(f"{i:>6}\t{line}" for i, line in enumerate(lines, 1))


VARIANTS: dict[str, Callable[[str], str]] = {
    "wrap80": _wrap(80),
    "wrap100": _wrap(100),
    "wrap120": _wrap(120),
    "wrap132": _wrap(132),
    "wrap200": _wrap(200),
    "crlf-ansi": _crlf_ansi,
    "srun-l": _rank_prefix(lambda r: f"{r}: "),
    "mpirun": _rank_prefix(lambda r: f"[1,{r}]<stderr>:"),
    "sagemaker": _rank_prefix(lambda r: f"[1,mpirank:{r},algo-1]<stderr>:"),
    "interleaved": _interleave,
    # every line behind a head that names no rank: ``kubectl logs --prefix`` / docker compose,
    # and pytest's failure output
    "kubectl": lambda text: "".join(f"[pod/trainer-0/main] {line}"
                                    for line in text.splitlines(keepends=True)),
    "compose": lambda text: "".join(f"trainer-1  | {line}"
                                    for line in text.splitlines(keepends=True)),
    "pytest": lambda text: "".join(f"E   {line}" for line in text.splitlines(keepends=True)),
    # pasted into Markdown: an indented code block (Stack Overflow's form), a fenced one, a quote
    # (GitHub writes a quoted blank line as ">")
    "md-indented": lambda text: "".join(f"    {line}" if line.strip() else line
                                        for line in text.splitlines(keepends=True)),
    "md-fenced": lambda text: f"```text\n{text}```\n",
    "md-quoted": lambda text: "".join(f"> {line}" if line.strip() else ">\n"
                                      for line in text.splitlines(keepends=True)),
    # a collector's timestamp on every line: ``kubectl logs --timestamps``, journald
    "kubectl-ts": _stamped(lambda i: f"2024-05-01T12:{i // 60 % 60:02d}:{i % 60:02d}.123456789Z "),
    "journald": _stamped(lambda i: f"May 01 12:00:{i % 60:02d} node-3 python[4242]: "),
    # a terminal's screen copied as it shows, every row padded to its width
    "screen120": _screen(120),
    # copied out of `cat -n` (a viewer's line numbers); one or two numbered lines are no count
    # that can be told from a program's own, so shorter pastes are left as they are
    "cat-n": _numbered,
}

# Variants that re-paste a log the same way but for a detail (which head with no rank, which
# Markdown form, which collector's stamp): each log is re-pasted in one of each family, chosen by
# its name, so that every variant still meets a third to a half of the corpus while the suite
# does not grow by twenty analyses per new log. Wraps, rank heads and the rest run on every log,
# and every (log, variant) in DIFFERS runs whatever the choice.
FAMILIES: tuple[tuple[str, ...], ...] = (
    ("kubectl", "compose", "pytest"),
    ("md-indented", "md-fenced", "md-quoted"),
    ("kubectl-ts", "journald"),
)


def _chosen(stem: str) -> list[str]:
    """The variants a log is re-pasted in: all but one of each family's, by its name's CRC."""
    left_out = {name for family in FAMILIES for i, name in enumerate(family)
                if i != zlib.crc32(f"{stem}/{family[0]}".encode()) % len(family)}
    return [name for name in VARIANTS if name not in left_out
            or (stem, name) in DIFFERS]


_SCREEN_OF_SCREEN = (
    "the paste is itself a screen copy (rows padded to about 190 columns); wrapped again at 120 "
    "and padded, each row's padding goes on over rows of blanks, which are then kept as blank "
    "lines between its rows")

# (log stem, variant): what the variant gives today instead of the original's verdict.
DIFFERS: dict[tuple[str, str], str] = {
    ("zq_bagel_zebra_cot_run_err_healthy_fsdp", "interleaved"):
        "init_hang (cue) instead of healthy: rank 7's one prefixed record, ProcessGroupNCCL's "
        "'using GPU 7 to perform barrier' warning (line 10), is dealt last in the round-robin, "
        "after all the unprefixed training output: the log then ends in a set-up line with "
        "nothing after it (setup-stops), which is what a job stuck in its first barrier shows",
    ("j_ultralytics_12905_zero_first_barrier_rank0_caching", "wrap80"):
        "rank_died (cue) instead of missing_rank [0]: the paste is itself hard-wrapped at 117 "
        "(its frames cut before ', in train'); cut again at 80, the 117-column cuts fall "
        "mid-piece and the frames through torch_distributed_zero_first are not rejoined",
    ("j_ultralytics_12905_zero_first_barrier_rank0_caching", "wrap100"):
        "rank_died (cue) instead of missing_rank [0]: as at 80",
    ("e_torchtune_2651_rank0_ckpt_save_timeout", "kubectl-ts"):
        "missing_rank [] instead of [0]: the paste is hard-wrapped, and the variant stamps the "
        "wrapped piece of the watchdog's line too (a collector stamps lines before a terminal "
        "cuts them), so the piece reads as a line of its own",
    ("e_torchtune_2651_rank0_ckpt_save_timeout", "journald"):
        "missing_rank [] instead of [0]: as with kubectl-ts, the wrapped piece stamped",
    ("e_megatron_lm_1880_rank0_sigsegv_elastic", "screen120"):
        "rank_died [] instead of [0]: " + _SCREEN_OF_SCREEN,
    ("ze_speechbrain_701_find_unused_params_warning", "screen120"):
        "inconclusive instead of healthy: a tqdm bar's unfilled part of 240 blanks, cut at 120 and "
        "padded, is a row of blanks that ends the bar's row as a screen's padding would",
    ("h_accelerate_3413_resume_multinode_wrapped", "md-indented"):
        "network_fault [] instead of [22]: the paste is a screen copy (rows padded to 164 "
        "columns, pdsh's head on each); indented afterwards, the indentation on a screen's rows "
        "is taken for the log's own (a table's), so pdsh's head behind it is not peeled",
    ("zg_ms_swift_4340_packing_rank0_broadcast_timeout", "srun-l"):
        "missing_rank [6] instead of [0]: the paste starts inside rank 6's traceback (its header "
        "cut off); behind srun's '6: ' the headless frames are not read as a traceback, so rank 6 "
        "reads as a rank whose log stops with no error",
    ("za_ssd.pytorch_91_worker_emfile", "screen120"):
        "rank_died instead of dataloader_stall: " + _SCREEN_OF_SCREEN + " (as at 80)",
    ("b_llamafactory_6849_nccl_broken_pipe", "screen120"):
        "network_fault [5] instead of []: a 239-character line's second row is 119 long and gets "
        "one blank of padding, which is what a row cut right after a blank ends with: read as cut, "
        "it is joined with the next line (a row one short of the width cannot be told from it)",
    ("x_vidur_49_send_recv_profiling_errno97", "screen120"):
        "inconclusive instead of healthy: " + _SCREEN_OF_SCREEN + " (a tqdm bar's unfilled part)",
    ("za_ssd.pytorch_91_worker_emfile", "wrap80"):
        "rank_died instead of dataloader_stall: the paste's frame lines are already screen rows "
        "padded to 160 columns around their cut ('_worker_l<blanks>oop'); re-wrapped at 80 the "
        "padding is split across rows and the frame name stays cut",
    ("za_ssd.pytorch_91_worker_emfile", "wrap120"):
        "rank_died instead of dataloader_stall: as at 80, the screen-row padding split by a second "
        "wrap leaves '_worker_loop' cut",
    ("za_ssd.pytorch_91_worker_emfile", "wrap100"):
        "rank_died instead of dataloader_stall: as at 80, the screen-row padding split by a second "
        "wrap leaves '_worker_loop' cut",
    ("za_ssd.pytorch_91_worker_emfile", "wrap132"):
        "rank_died instead of dataloader_stall: as at 80",
    ("zo_verl_agent2_dp_actor_v1_sft_branch_mismatch", "wrap100"):
        "rank_died (Ray's worker died) instead of missing_rank [1]: every line starts with Ray's coloured head (ESC[36m(WorkerDict pid=N)ESC[0m); cut again, the watchdog lines' pieces are not rejoined behind it, so no SeqNum is read and Ray's death notice is all that is left (the original is itself a known miss: the label is a mismatch)",
    ("zo_verl_agent2_dp_actor_v1_sft_branch_mismatch", "wrap120"):
        "as at 100",
    ("zo_verl_agent2_dp_actor_v1_sft_branch_mismatch", "wrap132"):
        "as at 100",
    ("zo_verl_agent2_dp_actor_v1_sft_branch_mismatch", "wrap200"):
        "as at 100",
    ("zo_verl_agent2_dp_actor_v1_sft_branch_mismatch", "screen120"):
        "as at 100",
    ("h_deepep_106_ib_error12_multinode_wrapped", "wrap100"):
        "network_fault [5] instead of network_fault []: as at 200, the screen rows' padding split "
        "by a second wrap starts one IB error's line on its own, read with rank 5's prefix",
    ("h_deepep_106_ib_error12_multinode_wrapped", "wrap200"):
        "network_fault [5] instead of network_fault []: the paste is two screen rows of 1000 and "
        "359 columns (records padded with blanks and run together); re-wrapped at 200, the padding "
        "splits so that one IB error's line starts on its own and is read with rank 5's prefix",
}


def _first(path: Path) -> tuple[str | None, tuple[int, ...]]:
    evidence, _ = load_paths([str(path)], LoadOptions())
    verdict, _ = analyze(evidence)
    if not verdict.findings:
        return verdict.status.value, ()
    root = verdict.findings[0]
    return root.kind.value, tuple(root.culprit_ranks)


# both sides are read under one neutral name: a fixture's name ("..._rank0_absent.log") would
# otherwise be taken for the rank whose log it is, as a user's "rank0.log" is
PASTE_NAME = "log.txt"
_ORIGINAL: dict[Path, tuple[str | None, tuple[int, ...]]] = {}


def _original(path: Path, tmp_path: Path) -> tuple[str | None, tuple[int, ...]]:
    if path not in _ORIGINAL:
        copy = tmp_path / "original" / PASTE_NAME
        copy.parent.mkdir()
        copy.write_bytes(path.read_bytes())
        _ORIGINAL[path] = _first(copy)
    return _ORIGINAL[path]


@pytest.mark.parametrize(("path", "variant"),
                         [pytest.param(path, variant, id=f"{path.stem}-{variant}")
                          for path in LOGS for variant in _chosen(path.stem)])
def test_a_log_pasted_another_way_gives_the_same_verdict(path: Path, variant: str,
                                                         tmp_path: Path) -> None:
    text = path.read_text(encoding="utf-8", errors="replace")
    changed = VARIANTS[variant](text)
    if changed == text:
        pytest.skip("this variant leaves the log as it is")
    copy = tmp_path / PASTE_NAME
    copy.write_bytes(changed.encode("utf-8"))
    same = _first(copy) == _original(path, tmp_path)
    known = DIFFERS.get((path.stem, variant))
    if known is not None:
        # run, not skipped: a variant that now agrees must leave the list
        assert not same, f"now gives the original's verdict: remove it from DIFFERS ({known})"
        pytest.xfail(known)
    assert same


def test_each_family_is_shared_out_over_the_corpus() -> None:
    # every variant of a family meets a fair share of the logs, and a log gets one of each
    for family in FAMILIES:
        counts = {name: sum(name in _chosen(p.stem) for p in LOGS) for name in family}
        assert min(counts.values()) >= len(LOGS) // (2 * len(family)), counts
    assert all(sum(name in _chosen(p.stem) for name in family) >= 1
               for p in LOGS for family in FAMILIES)
    assert {name for family in FAMILIES for name in family} <= set(VARIANTS)


def test_the_variants_change_what_they_claim() -> None:
    text = ("[rank1]: a\n[rank0]: b\n[rank1]: c\n[rank1]: d\nplain\n[rank0]: " + "x" * 130
            + "\n")
    assert VARIANTS["srun-l"](text).startswith("1:  a\n0:  b\n")
    assert VARIANTS["mpirun"](text).startswith("[1,1]<stderr>: a\n")
    mixed = VARIANTS["interleaved"](text)
    assert sorted(mixed.splitlines()) == sorted(text.splitlines())
    assert [ln for ln in mixed.splitlines() if ln.startswith("[rank1]")] == \
        ["[rank1]: a", "[rank1]: c", "[rank1]: d"]
    assert mixed != text
    assert max(map(len, VARIANTS["wrap120"](text).splitlines())) == 120
    assert "\r\n" in VARIANTS["crlf-ansi"](text)
    assert VARIANTS["cat-n"](text).startswith("     1\t[rank1]: a\n     2\t[rank0]: b\n")
    assert VARIANTS["cat-n"]("one line\n") == "one line\n"
