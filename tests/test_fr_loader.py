"""The flight-recorder loader on synthetic and recorded dumps."""

from __future__ import annotations

import json
import pickle

import pytest

from hangscope.errors import BadInputError
from hangscope.sources import flight_recorder as fr

from frdumps import history, make_dump, make_entry, write_dumps


@pytest.mark.parametrize("name, rank", [
    ("nccl_trace_rank_12", 12), ("fr_rank3.json", 3), ("node7-rank-5.pkl", 5),
    ("host12_nccl_trace_rank_7", 7), ("dump_9", 9), ("trace.pkl", None),
])
def test_rank_from_name(name, rank) -> None:
    assert fr.rank_from_name(f"/x/{name}") == rank


def test_rank_from_name_with_prefix() -> None:
    assert fr.rank_from_name("/d/trace_node3_12", prefix="trace_node3_") == 12
    assert fr.rank_from_name("/d/other_12", prefix="trace_node3_") is None


def test_pickle_and_json_forms_load_the_same(tmp_path) -> None:
    dump = make_dump(history(3) + [make_entry(3, seq=4, state="started")], 2)
    [pkl] = write_dumps(str(tmp_path / "p"), {0: dump})
    [js] = write_dumps(str(tmp_path / "j"), {0: dump}, fmt="json")
    a, _ = fr.load_dump(pkl, 0)
    b, _ = fr.load_dump(js, 0)
    assert [(e.op, e.seq, e.completed, e.input_sizes) for e in a.entries] == \
           [(e.op, e.seq, e.completed, e.input_sizes) for e in b.entries]
    assert a.entries[-1].completed is False
    assert a.process_groups["0"].ranks == (0, 1)


def test_p2p_profiling_names_give_peer() -> None:
    assert fr._parse_profiling_name("nccl:send 0->3") == ("nccl", "send", 3, True)
    assert fr._parse_profiling_name("nccl:recv 1<-2") == ("nccl", "recv", 2, True)
    assert fr._parse_profiling_name("gloo:all_reduce") == ("gloo", "all_reduce", None, False)


def test_gloo_retired_flag_means_completed(tmp_path) -> None:
    entries = [make_entry(0, seq=1, backend="gloo", state="scheduled", retired=True),
               make_entry(1, seq=2, backend="gloo", state="scheduled", retired=False)]
    [path] = write_dumps(str(tmp_path), {0: make_dump(entries, 2)})
    dump, _ = fr.load_dump(path, 0)
    assert [e.completed for e in dump.entries] == [True, False]
    assert dump.backend == "gloo"


def test_bad_entry_is_reported_and_skipped(tmp_path) -> None:
    entries = history(3)
    del entries[1]["state"]
    [path] = write_dumps(str(tmp_path), {0: make_dump(entries, 2)})
    dump, problems = fr.load_dump(path, 0)
    assert len(dump.entries) == 2
    assert problems == [f"{path}: entry 1: missing field 'state'"]


@pytest.mark.parametrize("content, reason", [
    (b"", "empty file"),
    (b"\x80\x02}q\x00(X\x07\x00\x00\x00version", "truncated or corrupt pickle"),
    (b"{\"version\": ", "neither a pickle nor valid JSON"),
    (json.dumps([1, 2]).encode(), "top level is list"),
    (pickle.dumps({"hello": 1}, protocol=2), "not a flight-recorder dump"),
])
def test_unusable_files_get_one_line(tmp_path, content, reason) -> None:
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(content)
    with pytest.raises(BadInputError) as info:
        fr.load_dump(str(path), 0)
    assert str(info.value).startswith(f"{path}: ")
    assert reason in str(info.value)
    assert "\n" not in str(info.value)


def test_truncated_dump_of_real_size(tmp_path) -> None:
    dump = make_dump(history(200), 2)
    data = pickle.dumps(dump, protocol=2)
    path = tmp_path / "nccl_trace_rank_1"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(BadInputError, match="truncated or corrupt pickle"):
        fr.load_dump(str(path), 1)


def test_clashing_rank_names_ask_for_prefix(tmp_path) -> None:
    a = tmp_path / "a" / "trace_3"
    b = tmp_path / "b" / "trace_3"
    for p in (a, b):
        p.parent.mkdir()
        p.write_bytes(b"x")
    with pytest.raises(BadInputError, match="pass --prefix"):
        fr.assign_ranks([str(a), str(b)])


def test_json_beside_pickle_prefers_pickle(tmp_path) -> None:
    paths = [str(tmp_path / "nccl_trace_rank_0.json"), str(tmp_path / "nccl_trace_rank_0")]
    assert fr.assign_ranks(paths) == {0: str(tmp_path / "nccl_trace_rank_0")}
