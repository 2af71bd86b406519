"""The columnar reading of a dump (sources/fr_columns) gives exactly the digest the
record-by-record reading gives, on every FR fixture and on the benchmark's layouts."""

from __future__ import annotations

from pathlib import Path

import pytest

from hangscope.sources import flight_recorder, fr_columns, fr_digest, fr_reduce

from fixtures import fr_shapes, synth_fr

ROOT = Path(__file__).resolve().parents[1]


def _dumps(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name != "expected.json"
                  and flight_recorder.looks_like_fr_dump(p.read_bytes()[:64]))


def _both(path: Path) -> tuple[fr_digest.DumpDigest, fr_digest.DumpDigest, bool]:
    """The digest as read by columns (where it can be) and record by record."""
    raw, entries = flight_recorder.read_raw(str(path))
    columnar = fr_reduce.Reducer(str(path), 0, raw, entries, []).digest()
    reducer = fr_reduce.Reducer(str(path), 0, raw, entries, [])
    plain = reducer.finish(*reducer.by_record())
    return columnar, plain, fr_columns.scan(entries) is not None


def test_fixture_digests_are_the_same() -> None:
    # GIVEN every flight-recorder dump among the fixtures
    paths = _dumps(ROOT / "fixtures" / "nccl") + _dumps(ROOT / "fixtures" / "recorded")
    assert len(paths) > 20
    by_columns = 0
    for path in paths:
        # WHEN reduced by columns and record by record THEN the digests are equal
        columnar, plain, scanned = _both(path)
        assert columnar == plain, path
        by_columns += scanned
    # and the columnar path did read most of them
    assert by_columns > len(paths) // 2, (by_columns, len(paths))


@pytest.mark.parametrize(("writer", "fmt", "timing"), [
    ("c10", "pickle", True), ("python", "pickle", True), ("python", "json", True),
    ("c10", "pickle", False)])
@pytest.mark.parametrize("version", ["2.10", "2.7", "2.2"])
@pytest.mark.parametrize("fault", ["missing_rank", "none"])
def test_benchmark_digests_are_the_same(tmp_path: Path, version: str, fault: str,
                                        writer: str, fmt: str, timing: bool) -> None:
    # GIVEN the benchmark's layout (tp and dp groups, a full ring buffer), pickled the way c10
    # or Python does, or as JSON (from 2.7 on), with and without times
    if fmt == "json" and version == "2.2":
        pytest.skip("FR 2.2 has no JSON form")
    synth_fr.write_large(tmp_path, 16, 300, version, fmt, fault=fault, writer=writer,
                         timing=timing)
    paths = _dumps(tmp_path)
    assert len(paths) == 16
    for path in paths:
        # WHEN reduced both ways THEN equal, and read by columns
        columnar, plain, scanned = _both(path)
        assert columnar == plain, path
        assert scanned, path


@pytest.mark.parametrize("shape", sorted(fr_shapes.SHAPES))
def test_shape_digests_are_the_same(tmp_path: Path, shape: str) -> None:
    # GIVEN each of the benchmark's dump shapes at a small size
    fr_shapes.write(tmp_path, shape, 32, 150)
    for path in _dumps(tmp_path):
        # WHEN reduced both ways THEN equal, and read by columns
        columnar, plain, scanned = _both(path)
        assert columnar == plain, path
        assert scanned, path


def test_sizes_of_another_type_are_read_as_the_converter_reads_them(tmp_path: Path) -> None:
    # GIVEN a dump whose newest completed records have sizes equal to, but not of the type of,
    # those of the first record of their kind (4096.0 for 4096, True for 1)
    synth_fr.write_large(tmp_path, 16, 300, "2.10", fault="none", writer="c10")
    raw, entries = flight_recorder.read_raw(str(_dumps(tmp_path)[0]))
    for entry, kind in zip(entries[-30:], (float, bool) * 15):
        entry["input_sizes"] = [[kind(dim) for dim in dims] for dims in entry["input_sizes"]]
    # WHEN reduced by columns and record by record
    columnar = fr_reduce.Reducer("d", 0, raw, entries, []).digest()
    reducer = fr_reduce.Reducer("d", 0, raw, entries, [])
    plain = reducer.finish(*reducer.by_record())
    # THEN the records kept whole show the sizes as the converter reads them (which takes a
    # value equal to one it has seen for that one)
    assert repr(columnar) == repr(plain)
    dims = [dim for part in columnar.groups.values() for shipped in part.kept.values()
            for sizes in shipped[10] for dim in sizes]
    assert bool in set(map(type, dims))
