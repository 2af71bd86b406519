"""The restricted unpickler: GIVEN hostile pickles WHEN loaded THEN nothing runs."""

from __future__ import annotations

import os
import pickle

import pytest

from hangscope.cli import main
from hangscope.sources import safe_pickle

from frdumps import history, make_dump, write_dumps


class _Evil:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (os.system, (f"touch {self.marker}",))


def test_builtin_containers_load() -> None:
    data = pickle.dumps({"a": [1, 2.5, None, True], "b": ("x", b"y")}, protocol=4)
    assert safe_pickle.loads(data) == {"a": [1, 2.5, None, True], "b": ("x", b"y")}


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_reduce_to_os_system_is_refused_and_nothing_runs(tmp_path, protocol) -> None:
    marker = tmp_path / "pwned"
    data = pickle.dumps({"version": "2.10", "entries": [_Evil(str(marker))]}, protocol=protocol)
    with pytest.raises(safe_pickle.ForbiddenPickleError, match="posix.system|os.system"):
        safe_pickle.loads(data)
    assert not marker.exists()


def test_hostile_dump_beside_good_ones_is_refused_and_the_rest_analyzed(tmp_path, capsys) -> None:
    # GIVEN two good dumps and one whose entries smuggle os.system
    folder = tmp_path / "dumps"
    write_dumps(str(folder), {0: make_dump(history(3), 3), 1: make_dump(history(3), 3)})
    marker = tmp_path / "pwned"
    (folder / "nccl_trace_rank_2").write_bytes(
        pickle.dumps({"version": "2.10", "entries": [_Evil(str(marker))]}, protocol=2))
    # WHEN analyzed through the real entry point
    code = main(["analyze", str(folder), "--out", str(tmp_path / "out")])
    # THEN nothing ran, rank 2's dump is named as refused, and the others were analyzed
    assert not marker.exists()
    out = capsys.readouterr().out
    assert "nccl_trace_rank_2: unsafe pickle refused" in out
    assert code in (0, 1, 3)
    assert (tmp_path / "out" / "verdict.json").exists()
