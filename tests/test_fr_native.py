"""The C reader of flight-recorder pickles (hangscope/_frscan.c, sources/fr_native) reads what
the unpickler reads, or declines: on every FR fixture, every benchmark shape, hand-made odd
pickles and seeded corruptions of real dumps, whatever it accepts gives the objects, the
columns and the digest of the unpickler's path."""

from __future__ import annotations

import io
import os
import pickle
import random
import shutil
import struct
from pathlib import Path
from typing import Any

import pytest

from hangscope.errors import BadInputError
from hangscope.sources import flight_recorder, fr_columns, fr_native, fr_reduce, safe_pickle

from fixtures import c10_pickle, fr_shapes, synth_fr

ROOT = Path(__file__).resolve().parents[1]

frscan = pytest.importorskip("hangscope._frscan", reason="the C reader was not built")


def _dumps(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name != "expected.json"
                  and flight_recorder.looks_like_fr_dump(p.read_bytes()[:64]))


def _pickles() -> list[Path]:
    return [p for p in _dumps(ROOT / "fixtures" / "nccl") + _dumps(ROOT / "fixtures" / "recorded")
            if p.read_bytes()[:1] == b"\x80"]


def _digest(path: Path, native: bool, monkeypatch: pytest.MonkeyPatch) -> Any:
    with monkeypatch.context() as patch:
        patch.setattr(fr_native, "ENABLED", native)
        try:
            return fr_reduce.reduce_dump(str(path), 0)
        except BadInputError as exc:
            return str(exc)


def _same_as_unpickled(data: bytes) -> bool:
    """Whether the C reader accepted ``data``; if it did, asserts that its top level, its
    records and its columns are the unpickler's."""
    got = frscan.read(data)
    if got is None:
        return False
    top, entries, (rids, seqs, p2p_seqs, created, timed, firsts) = got
    unpickled = safe_pickle.loads(data)  # accepted: the unpickler must read it too
    records = unpickled.pop("entries")
    assert top == unpickled
    assert len(entries) == len(records)
    assert [entries[i] for i in range(len(entries))] == records
    assert entries[0] is entries[0]  # made once, shared, as the unpickler shares
    cols = fr_columns.scan(records)
    if cols is not None:
        assert (rids, seqs, p2p_seqs, created, timed, firsts) == (
            cols.record_ids, cols.seqs, cols.p2p_seqs, cols.created, cols.timed, cols.firsts)
    return True


def test_the_c_reader_is_built_where_a_compiler_is() -> None:
    # GIVEN a machine with a C compiler (the project's): the install built the extension, or
    # every dump would silently take the slower path
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler here")
    assert fr_native.ENABLED or os.environ.get("HANGSCOPE_NO_NATIVE")


def test_every_fixture_pickle_reads_as_unpickled(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN every pickled flight-recorder fixture (recorded torch dumps, built NCCL ones)
    paths = _pickles()
    assert len(paths) > 20
    for path in paths:
        # WHEN the C reader reads it THEN it takes it, as the unpickler reads it
        assert _same_as_unpickled(path.read_bytes()), path
        # and the digest is the one the unpickler's path makes
        assert _digest(path, True, monkeypatch) == _digest(path, False, monkeypatch), path


@pytest.mark.parametrize("shape", sorted(fr_shapes.SHAPES))
def test_benchmark_shapes_read_as_unpickled(tmp_path: Path, shape: str,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN each of the benchmark's dump shapes, small
    fr_shapes.write(tmp_path, shape, 16, 150)
    for path in _dumps(tmp_path):
        # WHEN reduced with and without the C reader THEN the digests are equal
        assert _digest(path, True, monkeypatch) == _digest(path, False, monkeypatch), path
        if path.read_bytes()[:1] == b"\x80":
            assert _same_as_unpickled(path.read_bytes()), path


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
@pytest.mark.parametrize("version", ["2.10", "2.7", "2.2"])
def test_python_pickles_of_every_protocol(tmp_path: Path, protocol: int, version: str,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN dumps pickled by Python's pickle module with each protocol (FRAME, MEMOIZE,
    # SHORT_BINUNICODE from 4 on), with a missing rank
    synth_fr.write_large(tmp_path, 4, 200, version, fault="missing_rank", writer="c10")
    for path in _dumps(tmp_path):
        data = pickle.dumps(safe_pickle.loads(path.read_bytes()), protocol=protocol)
        path.write_bytes(data)
        # WHEN read THEN taken, and read as the unpickler reads it
        assert _same_as_unpickled(data)
        assert _digest(path, True, monkeypatch) == _digest(path, False, monkeypatch)


def _dump(entries: list[Any], **top: Any) -> dict[str, Any]:
    return {"version": "2.10", "pg_config": {}, "entries": entries, **top}


def _record(**fields: Any) -> dict[str, Any]:
    record = {"record_id": 0, "pg_id": 0, "process_group": ("0", "default_pg"),
              "collective_seq_id": 1, "p2p_seq_id": 0, "op_id": 1,
              "profiling_name": "nccl:all_reduce", "time_created_ns": 5, "duration_ms": 1.5,
              "input_sizes": [[4]], "input_dtypes": ["Float"], "output_sizes": [[4]],
              "output_dtypes": ["Float"], "state": "completed", "is_p2p": False,
              "timeout_ms": 600000, "retired": True, "frames": []}
    record.update(fields)
    return record


class _Evil:
    def __reduce__(self) -> tuple[Any, ...]:
        return (os.getcwd, ())


@pytest.mark.parametrize(("why", "data"), [
    ("an import", pickle.dumps(_dump([_record(frames=[_Evil()])]), protocol=2)),
    ("bytes", pickle.dumps(_dump([_record(state=b"completed")]), protocol=3)),
    ("protocol 0", pickle.dumps(_dump([_record()]), protocol=0)),
    ("a float size", c10_pickle.dumps(_dump([_record(input_sizes=[[4.0]])]))),
    ("a bool record id", c10_pickle.dumps(_dump([_record(record_id=True)]))),
    ("the group a list", c10_pickle.dumps(_dump([_record(process_group=["0", "x"])]))),
    ("a str timeout", c10_pickle.dumps(_dump([_record(timeout_ms="600000")]))),
    ("a record not a dict", c10_pickle.dumps(_dump([_record(), [1, 2]]))),
    ("no records", c10_pickle.dumps(_dump([]))),
    ("an int past 64 bits", pickle.dumps(_dump([_record(record_id=1 << 70)]), protocol=2)),
    ("a set", pickle.dumps(_dump([_record()], extra={1, 2}), protocol=4)),
])
def test_declines_what_it_does_not_read_as_the_unpickler(why: str, data: bytes) -> None:
    # GIVEN a pickle with one thing the C reader leaves to the unpickler
    # WHEN read THEN it declines (the caller unpickles)
    assert frscan.read(data) is None, why


def test_declines_cycles_deep_nesting_bad_text_and_truncation() -> None:
    base = c10_pickle.dumps(_dump([_record()]))
    assert frscan.read(base) is not None
    # a list that holds itself
    looped: list[Any] = []
    looped.append(looped)
    assert frscan.read(pickle.dumps(_dump([_record()], loop=looped), protocol=2)) is None
    # nesting deeper than any dump's
    deep: list[Any] = []
    for _ in range(150):
        deep = [deep]
    assert frscan.read(pickle.dumps(_dump([_record()], deep=deep), protocol=2)) is None
    # a string that is not UTF-8 (the unpickler raises)
    text = b"X" + struct.pack("<I", 9) + b"completed"
    bad = base.replace(text, b"X" + struct.pack("<I", 9) + b"complet\xff\xfe", 1)
    assert bad != base and frscan.read(bad) is None
    with pytest.raises(UnicodeDecodeError):
        safe_pickle.loads(bad)
    # every truncation
    for cut in range(len(base)):
        assert frscan.read(base[:cut]) is None


def test_reads_from_any_buffer_and_keeps_no_reference_to_it() -> None:
    data = bytearray(c10_pickle.dumps(_dump([_record(), _record(record_id=1)])))
    top, entries, _cols = frscan.read(memoryview(data))
    data[:] = b"\0" * len(data)  # the records do not read the buffer again
    assert entries[1]["record_id"] == 1 and top["version"] == "2.10"
    with pytest.raises(IndexError):
        entries[2]
    assert [record["record_id"] for record in entries] == [0, 1]


def test_seeded_corruptions_read_as_unpickled_or_are_declined(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN real dumps (and their Python-pickled forms) with bytes changed or cut, as a broken
    # disk or a hostile host would leave them
    rng = random.Random(21)
    seeds = [p.read_bytes() for p in _pickles() if p.stat().st_size < 200_000][:12]
    seeds += [pickle.dumps(safe_pickle.loads(data), protocol=4) for data in seeds[:3]]
    accepted = 0
    for _ in range(3000):
        data = bytearray(rng.choice(seeds))
        if rng.random() < 0.3:
            data = data[:rng.randrange(len(data))]
        else:
            for _ in range(rng.randint(1, 4)):
                data[rng.randrange(len(data))] = rng.randrange(256)
        # WHEN the C reader reads it THEN it declines, or it reads what the unpickler reads and
        # the digest is the unpickler path's
        if _same_as_unpickled(bytes(data)):
            accepted += 1
            path = tmp_path / "nccl_trace_rank_0"
            path.write_bytes(bytes(data))
            assert _digest(path, True, monkeypatch) == _digest(path, False, monkeypatch)
    assert accepted > 50  # most changes land in text, which it reads like the unpickler


def test_a_frame_of_unhashable_values_is_read_not_a_crash(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a dump whose newest record's frame has a dict for its name (a hostile dump)
    path = tmp_path / "nccl_trace_rank_0"
    frames = [{"name": {"x": 1}, "filename": "train.py", "line": [3]}]
    path.write_bytes(c10_pickle.dumps(_dump([_record(), _record(record_id=1, frames=frames)])))
    # WHEN reduced either way THEN both read it, the same way, with the frame as text
    native, plain = _digest(path, True, monkeypatch), _digest(path, False, monkeypatch)
    assert native == plain and not isinstance(native, str)
    assert ("{'x': 1}", "train.py", None) in native.stacks[native.latest[20]]


def test_memo_and_sharing_survive(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a dump whose records share one frames list (as c10 shares frame dicts)
    frames = [{"name": "step", "filename": "train.py", "line": 7}]
    data = c10_pickle.dumps(_dump([_record(record_id=i, frames=frames) for i in range(3)]))
    _top, entries, _cols = frscan.read(data)
    # THEN the records share it as the unpickler's do
    assert entries[0]["frames"] is entries[2]["frames"]
    unpickled = pickle.Unpickler(io.BytesIO(data)).load()["entries"]
    assert unpickled[0]["frames"] is unpickled[2]["frames"]


def test_records_without_retired_or_thread_name(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a dump none of whose records has "retired" or "thread_name" (older FR formats;
    # the columnar scan once failed on it with an IndexError)
    records = [_record(record_id=i, collective_seq_id=i + 1) for i in range(4)]
    for record in records:
        del record["retired"]
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(c10_pickle.dumps(_dump(records)))
    # WHEN reduced either way THEN the same digest, of all four records
    native, plain = _digest(path, True, monkeypatch), _digest(path, False, monkeypatch)
    assert native == plain and native.n_entries == 4
