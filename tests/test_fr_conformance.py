"""torch's own flight-recorder analyzer tests, as a conformance suite: each case is written as
per-rank dumps in the shape torch's tests build them, analyzed by hangscope, and checked against
torch's cross-rank outcome, unless the case says (``reason``) why hangscope differs on purpose.

Cases come from pytorch ``test/distributed/flight_recorder/test_fr_analysis.py``:
``FlightRecorderEventTest`` (``test_match_one_event``: event A on rank 0, event B on rank 1;
``test_all_events``: every op in ``COLLECTIVES`` against itself), ``FlightRecorderE2ETest``
(``testBuildDB``: two ranks' dumps), and the newer upstream version's type-variant, numel,
uneven all_to_all, recv-from-any-source and FlightRecorderHook shape cases. torch's verdicts map to
hangscope's: FULLY_MATCHED, UNDECIDED and a passing build_db are no finding at all;
COLLECTIVE_TYPE_MISMATCH is collective_mismatch; SIZE_OR_SYNTAX_MISMATCH and
COLLECTIVE_DTYPE_MISMATCH are size_mismatch; COLLECTIVE_STATE_MISMATCH (one rank finished, its
peer did not) is missing_rank. torch blames the rank of the second event (``Culprit rank {other}``).
Where the installed torch carries the rule, ``test_installed_torch_agrees`` runs torch's analyzer
on the same events, so the table cannot drift from torch.
"""

from __future__ import annotations

import copy
import pickle
from dataclasses import dataclass, field
from typing import Any

import pytest

from hangscope.analysis.engine import analyze
from hangscope.options import LoadOptions
from hangscope.sources.load import load_paths

# torch 2.13's flight_recorder/components/types.py COLLECTIVES (test_all_events walks it)
COLLECTIVES = sorted({
    "broadcast", "_broadcast_oop", "reduce", "_reduce_oop", "all_gather", "all_gather_single",
    "all_gather_v", "all_reduce", "_all_gather_base", "all_gather_into_tensor_coalesced",
    "reduce_scatter", "reduce_scatter_single", "reduce_scatter_v",
    "reduce_scatter_tensor_coalesced", "_reduce_scatter_base", "gather", "scatter", "all_to_all",
    "all_to_all_single", "all_to_all_v_single", "all_reduce_barrier", "barrier", "split",
    "new_window", "allreduce_coalesced", "ALLGATHER_coalesced", "REDUCE_SCATTER_coalesced"})

KIND_OF = {"FULLY_MATCHED": None, "UNDECIDED": None, "pass": None,
           "COLLECTIVE_TYPE_MISMATCH": "collective_mismatch",
           "SIZE_OR_SYNTAX_MISMATCH": "size_mismatch", "COLLECTIVE_DTYPE_MISMATCH": "size_mismatch",
           "COLLECTIVE_STATE_MISMATCH": "missing_rank"}

PAIR = {"0": {"name": "0", "desc": "default", "ranks": "[0, 1]"}}
# testBuildDB's LOADED_FR_DETAIL_TEMPLATE: one sub_pg name, a different member on each rank
E2E = {0: {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"},
           "1": {"name": "1", "desc": "sub_pg", "ranks": "[0]"}},
       1: {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"},
           "1": {"name": "1", "desc": "sub_pg", "ranks": "[1]"}}}

SAME_RECORD = ("both ranks recorded the same record, which contradicts its op: torch names the "
               "second rank by position, hangscope every rank that recorded it")
ONE_PAIR = ("one send/recv pair cannot say which side is wrong: torch names the second event's "
            "rank by position, hangscope both ranks")


def event(name: str, pg: tuple[str, str], input_sizes: Any, output_sizes: Any,
          state: str = "scheduled", collective_seq_id: int = 0, p2p_seq_id: int = 0,
          output_dtypes: Any = "float32", input_dtypes: Any = "float32",
          backend: str = "nccl") -> dict[str, Any]:
    """torch's ``create_one_event``, field for field."""
    return {"profiling_name": f"{backend}:{name}", "state": state, "process_group": pg,
            "input_sizes": input_sizes, "output_sizes": output_sizes,
            "input_dtypes": input_dtypes, "output_dtypes": output_dtypes,
            "collective_seq_id": str(collective_seq_id), "p2p_seq_id": str(p2p_seq_id),
            "time_created_ns": 0, "frames": []}


def entry(record_id: int, name: str, input_sizes: Any, output_sizes: Any,
          state: str = "completed", collective_seq_id: int = 0, pg: tuple[str, str] = ("0",
          "default"), backend: str = "nccl", **kw: Any) -> dict[str, Any]:
    """torch's ``create_one_entry``: an event with a record id, not p2p."""
    made = event(name, pg, input_sizes, output_sizes, state, collective_seq_id,
                 backend=backend, **kw)
    made.update({"record_id": record_id, "is_p2p": False})
    return made


@dataclass(frozen=True)
class Case:
    id: str
    source: str  # the torch test it comes from
    entries: dict[int, list[dict[str, Any]]]  # per rank
    torch: str  # torch's verdict: a MatchState name, or "pass" (build_db found no error)
    torch_culprits: tuple[int, ...] = ()
    # where hangscope differs on purpose: (kind or None, culprits) and why
    differs: tuple[str | None, tuple[int, ...]] | None = None
    reason: str = ""
    pg_config: dict[int, dict[str, Any]] = field(default_factory=dict)  # per rank; PAIR if none
    installed: str = ""  # "event" or "db": torch 2.13's analyzer checks this row

    def expected(self) -> tuple[str | None, tuple[int, ...]]:
        if self.differs is not None:
            return self.differs
        return KIND_OF[self.torch], self.torch_culprits if KIND_OF[self.torch] else ()


def pair(case_id: str, source: str, a: dict[str, Any], b: dict[str, Any], torch: str,
         **kw: Any) -> Case:
    """match_one_event(a, b): a on rank 0, b on rank 1; torch blames rank 1."""
    def with_id(ev: dict[str, Any]) -> dict[str, Any]:
        return {**ev, "record_id": 0, "is_p2p": ev["profiling_name"].split(":")[1][:4]
                in ("send", "recv")}
    culprits = () if KIND_OF[torch] is None else (1,)
    return Case(case_id, source, {0: [with_id(a)], 1: [with_id(b)]}, torch, culprits, **kw)


def cases(backend: str) -> list[Case]:
    def ev(name: str, ins: Any, outs: Any, state: str = "scheduled", seq: int = 1,
           **kw: Any) -> dict[str, Any]:
        return event(name, ("0", "default"), ins, outs, state, seq, backend=backend, **kw)

    out: list[Case] = []
    src = "test_match_one_event"
    e1 = ev("all_reduce", [[4, 4]], [[4, 4]])
    e7 = ev("all_reduce", [[4, 4]], [[5, 4]], seq=2)
    e9 = ev("all_reduce", [[4, 4]], [[4, 4]], "completed")
    e10 = ev("all_reduce", [[4, 4]], [[4, 4]], "completed", output_dtypes="float16")
    e11 = ev("gather", [[4, 4]], [[4, 4], [4, 4]], "completed")
    out += [
        pair("e1-e1", src, e1, e1, "FULLY_MATCHED", installed="event"),
        pair("e1-e2", src, e1, ev("all_gather", [[4, 4]], [[4, 4]]), "COLLECTIVE_TYPE_MISMATCH",
             installed="event"),
        pair("e3-e4", src, ev("all_to_all", [[4, 4]], [[4, 4]]),
             ev("all_to_all", [[4, 4]], [[4, 4]]), "UNDECIDED", installed="event"),
        pair("e1-e5", src, e1, ev("all_reduce", [[5, 4]], [[4, 4]], p2p_seq_id=1),
             "SIZE_OR_SYNTAX_MISMATCH", installed="event"),
        pair("e1-e6", src, e1, ev("all_reduce", [[4, 4]], [[5, 4]], p2p_seq_id=2),
             "SIZE_OR_SYNTAX_MISMATCH", installed="event"),
        pair("e7-e7", src, e7, e7, "SIZE_OR_SYNTAX_MISMATCH", installed="event",
             differs=("size_mismatch", (0, 1)), reason=SAME_RECORD),
        pair("e1-e9", src, e1, e9, "COLLECTIVE_STATE_MISMATCH", installed="event",
             differs=("missing_rank", (0,)),
             reason="torch names the second rank by position (the one that completed); "
                    "hangscope the rank still inside the collective its peer completed"),
        pair("e10-e9", src, e10, e9, "COLLECTIVE_DTYPE_MISMATCH", installed="event",
             differs=("size_mismatch", (0,)),
             reason="torch names the second rank by position; hangscope the rank whose own "
                    "all_reduce record turns float32 into float16, which no all_reduce does"),
        pair("e11-e12", src, e11, ev("gather", [[4, 4]], [[]], "completed", output_dtypes=""),
             "FULLY_MATCHED", installed="event"),
        pair("e11-e13", src, e11, ev("gather", [[4, 4]], [[4, 4]], "completed",
                                     output_dtypes=""), "FULLY_MATCHED", installed="event"),
    ]
    for name in COLLECTIVES:  # test_all_events: each op against itself
        ins, outs = [[4, 4]], [[4, 4]]
        if name in ("reduce_scatter", "_reduce_scatter_base", "reduce_scatter_tensor_coalesced"):
            outs = [[8]]
        if name in ("all_gather", "_all_gather_base", "all_gather_into_tensor_coalesced"):
            outs = [[32]]
        verdict = "UNDECIDED" if name == "all_to_all" else "FULLY_MATCHED"
        one = ev(name, ins, outs)
        out.append(pair(f"all_events-{name}", "test_all_events", one, one, verdict,
                        installed="event"))
    out += _build_db_cases(backend)
    out += _newer_cases(backend, ev)
    return out


def _build_db_cases(backend: str) -> list[Case]:
    """testBuildDB: every entry completed, every collective_seq_id 0, as the test writes them."""
    def e(rid: int, name: str, ins: Any, outs: Any, **kw: Any) -> dict[str, Any]:
        return entry(rid, name, ins, outs, backend=backend, **kw)

    src = "testBuildDB"
    sub = ("1", "sub_pg")
    both = {r: [e(0, "all_reduce", [[4, 4]], [[4, 4]]),
                e(1, "all_reduce", [[5, 5]], [[5, 5]], pg=sub)] for r in (0, 1)}
    coal = {r: [e(0, "allreduce_coalesced", [[4, 4]], [[4, 4]])] for r in (0, 1)}
    bcast = {r: [e(0, "broadcast", [[4, 4]], [[4, 4]]), e(1, "broadcast", [[4, 4]], [[4, 4]]),
                 e(2, "coalesced", [[]], [[]])] for r in (0, 1)}
    uneven = {0: [e(0, "_broadcast_oop", [[4, 4]], [[4, 4]]),
                  e(1, "_broadcast_oop", [[5, 5]], [[5, 5]]),
                  e(2, "ALLGATHER_coalesced", [[]], [[]])],
              1: [e(0, "_broadcast_oop", [[4, 4]], [[4, 4]]),
                  e(1, "_broadcast_oop", [[4, 4]], [[4, 4]]),
                  e(2, "ALLGATHER_coalesced", [[]], [[]])]}
    reduce = {r: [e(0, "_reduce_oop", [[4, 4]], [[4, 4]]), e(1, "_reduce_oop", [[4, 4]], [[4, 4]]),
                  e(2, "REDUCE_SCATTER_coalesced", [[]], [[]])] for r in (0, 1)}
    empty_on_0 = {0: [e(0, "all_reduce", [[4, 4]], [[4, 4]])],
                  1: [e(0, "all_reduce", [[4, 4]], [[4, 4]]),
                      e(1, "_reduce_oop", [[4, 4]], [[4, 4]]),
                      e(2, "_reduce_oop", [[4, 4]], [[4, 4]]),
                      e(3, "REDUCE_SCATTER_coalesced", [[]], [[]])]}
    # case 6 with the seq ids NCCL writes: rank 0's empty coalescing block bumps its seq (to 2)
    # and records nothing; rank 1's block is seq 2
    nccl_seqs = {0: [e(0, "all_reduce", [[4, 4]], [[4, 4]], collective_seq_id=1)],
                 1: [e(0, "all_reduce", [[4, 4]], [[4, 4]], collective_seq_id=1)]
                 + [e(i, name, s, s, collective_seq_id=2) for i, name, s in
                    ((1, "_reduce_oop", [[4, 4]]), (2, "_reduce_oop", [[4, 4]]),
                     (3, "REDUCE_SCATTER_coalesced", [[]]))]}
    kw: dict[str, Any] = {"pg_config": E2E, "installed": "db"}
    return [
        Case("db1-all_reduce-and-sub_pg", src, both, "pass", **kw),
        Case("db2-allreduce_coalesced", src, coal, "pass", **kw),
        Case("db3-coalesced-broadcasts", src, bcast, "pass", **kw),
        Case("db4-uneven-coalesced-broadcast", src, uneven, "SIZE_OR_SYNTAX_MISMATCH", (1,), **kw),
        Case("db5-coalesced-reduces", src, reduce, "pass", **kw),
        Case("db6-empty-coalesced-on-rank-0", src, empty_on_0, "pass", **kw,
             differs=("collective_mismatch", (1,)),
             reason="the test gives every entry collective_seq_id 0, so rank 1's coalesced block "
                    "shares seq 0 with the all_reduce both ranks ran: hangscope matches by seq and "
                    "sees rank 1 run three more ops at seq 0 than rank 0 (torch pairs the first "
                    "all_reduce, then logs rank 0 missing from a block it still passes); with "
                    "NCCL's seq ids (db6-nccl-seqs) hangscope agrees"),
        Case("db6-nccl-seqs", src + " case 6, NCCL seq ids", nccl_seqs, "pass", **kw),
    ]


def _newer_cases(backend: str, ev: Any) -> list[Case]:
    """Cases of the newer upstream test file (after torch 2.13): not run on the installed torch."""
    out: list[Case] = []
    for a, b in (("all_gather", "_all_gather_base"), ("all_reduce", "allreduce_coalesced"),
                 ("reduce_scatter", "_reduce_scatter_base"), ("all_to_all", "all_to_all_single")):
        out.append(pair(f"variants-{a}-{b}", "test_collective_variants_are_distinct_types",
                        ev(a, [[8]], [[8]]), ev(b, [[8]], [[8]]), "COLLECTIVE_TYPE_MISMATCH"))
    good = ev("_all_gather_base", [[8]], [[16]])
    bad = ev("_all_gather_base", [[8]], [[24]])
    out += [pair("all_gather_base-good", "test_all_gather_base_numel_is_checked", good, good,
                 "FULLY_MATCHED"),
            pair("all_gather_base-bad", "test_all_gather_base_numel_is_checked", bad, bad,
                 "SIZE_OR_SYNTAX_MISMATCH", differs=("size_mismatch", (0, 1)),
                 reason=SAME_RECORD),
            pair("all_to_all_single-uneven", "test_all_to_all_single_uneven_splits",
                 ev("all_to_all_single", [[8]], [[12]]), ev("all_to_all_single", [[12]], [[8]]),
                 "UNDECIDED")]
    # test_recv_any_source_has_no_peer: group {2, 5}; send 0->1 on rank 2, recv 1<-? on rank 5
    group = {r: {"0": {"name": "0", "desc": "default", "ranks": "[2, 5]"}} for r in (2, 5)}

    def p2p(name: str, sizes: Any) -> dict[str, Any]:
        return {**ev(name, sizes, sizes, seq=0, p2p_seq_id=1), "record_id": 0, "is_p2p": True}

    recv = p2p("recv 1<-?", [[8]])
    src = "test_recv_any_source_has_no_peer"
    out += [Case("recv-any-source", src, {2: [p2p("send 0->1", [[8]])], 5: [recv]},
                 "FULLY_MATCHED", pg_config=group),
            Case("recv-any-source-short-send", src, {2: [p2p("send 0->1", [[4]])], 5: [recv]},
                 "SIZE_OR_SYNTAX_MISMATCH", (5,), pg_config=group,
                 differs=("size_mismatch", (2, 5)), reason=ONE_PAIR)]
    # FlightRecorderHookShapeTest: c10d's hook, backend nccl2, one shard-shaped buffer per rank
    def hook(rid: int, name: str, ins: Any, outs: Any, seq: int) -> dict[str, Any]:
        return entry(rid, name, ins, outs, "scheduled", seq, backend="nccl2",
                     input_dtypes=["Float"] * len(ins), output_dtypes=["Float"] * len(outs))

    src = "FlightRecorderHookShapeTest"
    shapes = (("all_reduce", [[8]], [[8]]), ("allreduce_coalesced", [[8], [4]], [[8], [4]]),
              ("reduce", [[8]], [[8]]), ("all_gather", [[8]], [[8], [8]]),
              ("reduce_scatter", [[8], [8]], [[8]]))
    for name, ins, outs in shapes:
        one = hook(0, name, ins, outs, 1)
        out.append(Case(f"hook-shape-{name}", src, {0: [one], 1: [one]}, "FULLY_MATCHED",
                        pg_config=E2E))
    run = [hook(i, name, ins, outs, i + 1) for i, (name, ins, outs) in
           enumerate(shapes[:1] + shapes[2:] + shapes[1:2])]
    out.append(Case("hook-shaped-run", src, {0: run, 1: copy.deepcopy(run)}, "pass",
                    pg_config=E2E))
    for case_id, name, ins, outs in (
            ("list-form-all_gather-wrong-length", "all_gather", [[8]], [[8], [8], [8]]),
            ("list-form-reduce_scatter-wrong-length", "reduce_scatter", [[8], [8], [8]], [[8]]),
            ("flattened-all_gather-wrong-numel", "all_gather", [[8]], [[17]]),
            ("flattened-reduce_scatter-wrong-numel", "reduce_scatter", [[17]], [[8]])):
        one = hook(0, name, ins, outs, 1)
        out.append(Case(case_id, src, {0: [one], 1: [one]}, "SIZE_OR_SYNTAX_MISMATCH", (1,),
                        pg_config=E2E, differs=("size_mismatch", (0, 1)), reason=SAME_RECORD))
    return out


CASES_NCCL = cases("nccl")


def write(tmp_path: Any, case: Case) -> str:
    folder = tmp_path / "dumps"
    folder.mkdir()
    for rank, entries in case.entries.items():
        dump = {"version": "2.8", "pg_config": case.pg_config.get(rank, PAIR),
                "pg_status": {}, "entries": entries, "rank": rank}
        (folder / f"dump_file_rank_{rank}").write_bytes(pickle.dumps(dump, protocol=2))
    return str(folder)


@pytest.mark.parametrize("backend", ["nccl", "gloo"])
@pytest.mark.parametrize("index", range(len(CASES_NCCL)), ids=[c.id for c in CASES_NCCL])
def test_hangscope_reaches_torchs_outcome(tmp_path, index: int, backend: str) -> None:
    # GIVEN torch's case as per-rank dumps (gloo: the same records under a gloo: prefix)
    case = cases(backend)[index]
    evidence, _ = load_paths([write(tmp_path, case)], LoadOptions())
    # WHEN hangscope analyzes them
    verdict, _ = analyze(evidence)
    # THEN it reaches torch's outcome, or the one the case says it reaches on purpose
    kind, culprits = case.expected()
    got = [(f.kind.value, f.culprit_ranks, f.summary) for f in verdict.findings]
    if kind is None:
        assert not got, (case.source, case.torch, got)
    else:
        assert got and got[0][:2] == (kind, list(culprits)), (case.source, case.torch, got)


def test_every_difference_says_why() -> None:
    differing = [c for c in CASES_NCCL if c.differs is not None]
    for case in CASES_NCCL:
        assert bool(case.reason) == (case.differs is not None), case.id
        if case.differs is not None:  # a "difference" that is torch's own outcome is none
            assert case.differs != (KIND_OF[case.torch], case.torch_culprits), case.id
    # 63 cases; hangscope names other culprits than torch in 9 and reaches another outcome in 1
    assert (len(CASES_NCCL), len(differing)) == (63, 10)
    assert [c.id for c in differing if c.differs and c.differs[0] != KIND_OF[c.torch]] == \
        ["db6-empty-coalesced-on-rank-0"]


@pytest.mark.parametrize("case", [c for c in CASES_NCCL if c.installed == "event"],
                         ids=lambda c: c.id)
def test_installed_torch_agrees_with_the_table(case: Case) -> None:
    utils = pytest.importorskip("torch.distributed.flight_recorder.components.utils")
    a, b = case.entries[0][0], case.entries[1][0]
    assert utils.match_one_event(a, b, {"0": {0, 1}}, "0").state.name == case.torch


@pytest.mark.parametrize("case", [c for c in CASES_NCCL if c.installed == "db"],
                         ids=lambda c: c.id)
def test_installed_torch_build_db_agrees_with_the_table(case: Case) -> None:
    builder = pytest.importorskip("torch.distributed.flight_recorder.components.builder")
    config = pytest.importorskip("torch.distributed.flight_recorder.components.config_manager")
    details = {f"dump_file_rank_{r}": {"entries": copy.deepcopy(entries), "rank": r,
                                       "pg_config": copy.deepcopy(case.pg_config[r]),
                                       "version": "2.8"}
               for r, entries in case.entries.items()}
    db = builder.build_db(details, config.JobConfig().parse_args([]), "2.8")
    failed = [c for c in db.collectives if not c.pass_check]
    if case.torch == "pass":
        assert not failed
    else:
        errors = {r: c.type_of_mismatch.state.name for f in failed
                  for r, c in (f.mismatch_collectives or {}).items()}
        assert errors == dict.fromkeys(case.torch_culprits, case.torch)
