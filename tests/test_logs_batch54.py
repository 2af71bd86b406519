"""Rules from blind batch 54's first look: two more flight-recorder analyzers' verdicts read as the
tools mean them (NVRx's table of groups with missing ranks, in both of its header forms; torch_npu's
"computational task took too long"), each with input that must not trip it."""

from __future__ import annotations

from pathlib import Path

from _logs_helpers import kind_and_culprits, verdict_of, write_paste

from hangscope.sources.logs import scan_log

_NVRX_ROWS = (
    "3      | DATA_PARALLEL_GROUP       | nccl:reduce_scatter | 1048576                     "
    "  | Float    | 5\n"
    "11     | TENSOR_MODEL_PARALLEL_GROUP,1 | nccl:all_reduce | 2048x1x4096                 "
    "  | BFloat16 | 5,6\n")


def _nvrx(head_ranks: str, prefix: str = "") -> str:
    head = (f"PGID   | Process Group Desc        | Op Type    | Size                           "
            f"  | Dtype    | {head_ranks} Ranks\n")
    return "Successfully processed 8 files.\n" + "".join(
        prefix + line + "\n" for line in (head + _NVRX_ROWS).splitlines())


def test_nvrx_table_names_every_rows_missing_ranks(tmp_path: Path) -> None:
    for n, (head, prefix) in enumerate((("Missing", ""),
                                        ("{missing_or_completed}", "INFO:__main__:"))):
        # GIVEN NVRx's summary table (the newer header, and the older literal one behind the
        # logger's prefix): rank 5 missing from a data-parallel reduce_scatter, 5 and 6 from a
        # tensor-parallel all_reduce
        text = _nvrx(head, prefix)
        reports = [e for e in scan_log(str(write_paste(tmp_path / str(n), text)))
                   if e.kind == "stall_report"]
        # THEN one report for the table, its ranks the rows' union, its first group named
        assert [(e.fields["tool"], e.fields["missing"], e.fields["pg"], e.fields["op"])
                for e in reports] == [("nvrx_fr", "5,6", "3:DATA_PARALLEL_GROUP",
                                       "reduce_scatter")]
        # AND the verdict names both ranks missing
        assert kind_and_culprits(verdict_of(tmp_path / f"v{n}", text)) == ("missing_rank", [5, 6])


def test_nvrx_table_of_completed_ranks_or_a_table_with_no_row_reads_nothing(
        tmp_path: Path) -> None:
    for n, text in enumerate((_nvrx("Completed"),
                              _nvrx("Missing").split("3      |")[0])):
        path = write_paste(tmp_path / str(n), text)
        # THEN no stall report
        assert not [e for e in scan_log(str(path)) if e.kind == "stall_report"]


def test_torch_npus_verdict_names_the_rank_that_computed_too_long(tmp_path: Path) -> None:
    # GIVEN analysis_flight.py's log: rank 3 of group 2 computed while its peers timed out
    text = ("2026-03-02 11:00:01,001 - INFO - Path: /var/log/fr/\n"
            "2026-03-02 11:00:01,001 - INFO - World Size: 16\n"
            "2026-03-02 11:00:01,004 - INFO - The pg_id 2's rank 3's Computational task took too "
            "long, causing the other ranks' HCCL task to time out.\n")
    # THEN rank 3 is the one the others waited for
    assert kind_and_culprits(verdict_of(tmp_path / "a", text)) == ("missing_rank", [3])


def test_torch_npus_other_verdicts_name_no_rank(tmp_path: Path) -> None:
    # GIVEN its verdicts that name an operator or no rank
    text = ("2026-03-02 11:00:01,004 - INFO - The pg_id 0's Communication Operator "
            "HcclAllReduce executed too slowly, causing the HCCL to time out.\n"
            "2026-03-02 11:00:01,005 - INFO - The computational task of the pg_id 1 after the "
            "communication operator HcclBroadcast took too long.\n")
    path = write_paste(tmp_path / "a", text)
    # THEN no stall report names a rank
    assert not [e for e in scan_log(str(path)) if e.kind == "stall_report"]
