"""Tests for fixtures/synth_fr.py: built NCCL flight-recorder dumps.

- every supported FR version emits exactly the documented key set (pickle and JSON);
- the NCCL semantics the analyzer relies on hold (states, seqs, windows, p2p names);
- torch 2.13's own loader and `torchfrtrace` read the dumps and report the injected fault;
- the committed fixtures in fixtures/nccl/ are byte-identical to a regeneration.
"""

from __future__ import annotations

import filecmp
import importlib.util
import io
import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from fixtures import synth_fr  # noqa: E402
from fixtures.synth_fr import FR_VERSIONS, SCENARIOS, expected_keys, write_large, write_scenario  # noqa: E402

NCCL_FIXTURES = ROOT / "fixtures" / "nccl"
HAVE_TORCH = importlib.util.find_spec("torch") is not None


class _NoGlobals(pickle.Unpickler):
    def find_class(self, module, name):  # pragma: no cover - must never be reached
        raise pickle.UnpicklingError(f"global {module}.{name} refused")


def load(path: Path) -> dict:
    data = path.read_bytes()
    if path.suffix == ".json":
        return json.loads(data)
    assert data[:2] == b"\x80\x02", "torch writes protocol-2 pickles"
    return _NoGlobals(io.BytesIO(data)).load()


def dumps_in(d: Path) -> dict[int, dict]:
    out = {}
    for p in sorted(d.iterdir()):
        if p.name.startswith(synth_fr.DEFAULT_PREFIX):
            out[int(p.name[len(synth_fr.DEFAULT_PREFIX) :].split(".")[0])] = load(p)
    return out


# ---------------------------------------------------------------- key sets per version


@pytest.mark.parametrize("version", list(FR_VERSIONS))
def test_pickle_key_set_per_version(tmp_path, version):
    truth = write_scenario("missing_rank", tmp_path, world_size=4, entries=20, version=version)
    top, required, optional = expected_keys(version, "pickle")
    spec = FR_VERSIONS[version]
    for rank, d in dumps_in(tmp_path).items():
        assert set(d) == top, (version, rank)
        assert list(d) == list(spec.top_keys()), "top-level insertion order as torch's dump()"
        assert d["version"] == version
        for e in d["entries"]:
            keys = set(e)
            assert required <= keys <= required | optional, (version, keys ^ required)
            assert list(e) == [k for k in spec.entry_keys() if k in e], "entry key order"
            assert ("duration_ms" in e) == (e["state"] == "completed")
            assert isinstance(e["process_group"], tuple)
        for cfg in d["pg_config"].values():
            assert set(cfg) == {"name", "desc", "ranks"} and isinstance(cfg["ranks"], str)
    assert truth["fr_version"] == version


def test_version_specific_keys(tmp_path):
    got = {}
    for v in FR_VERSIONS:
        write_scenario("healthy", tmp_path / v, world_size=2, entries=6, version=v)
        got[v] = load(tmp_path / v / "nccl_trace_rank_0")
    assert "pg_status" not in got["2.2"] and "pg_status" in got["2.3"]
    assert "nccl_version" in got["2.6"] and "comm_lib_version" not in got["2.6"]
    assert "comm_lib_version" in got["2.10"] and "nccl_version" not in got["2.10"]
    assert "thread_id" in got["2.10"]["entries"][0] and "thread_id" not in got["2.7"]["entries"][0]
    for v in ("2.2", "2.3", "2.4", "2.6", "2.7", "2.10"):
        e = got[v]["entries"][0]
        for k in ("p2p_seq_id", "op_id", "is_p2p", "timeout_ms", "time_discovered_started_ns"):
            assert k in e, (v, k)


@pytest.mark.parametrize("version", [v for v, s in FR_VERSIONS.items() if s.json])
def test_json_key_set_per_version(tmp_path, version):
    write_scenario("missing_rank", tmp_path, world_size=4, entries=20, version=version, fmt="json")
    top, required, optional = expected_keys(version, "json")
    files = sorted(tmp_path.glob("nccl_trace_rank_*.json"))
    assert len(files) == 4
    for p in files:
        raw = p.read_text()
        d = json.loads(raw)
        assert set(d) == top
        assert d["nccl_comm_state"] == {}
        assert raw == json.dumps(d, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        for st in d["pg_status"].values():
            assert all(isinstance(v, str) for v in st.values())
        for e in d["entries"]:
            assert required <= set(e) <= required | optional
            assert "frames" not in e and isinstance(e["process_group"], list)
            if e["state"] != "completed":
                assert e["time_discovered_completed_ns"] == 0


def test_json_unsupported_for_2_2(tmp_path):
    with pytest.raises(ValueError):
        write_scenario("healthy", tmp_path, version="2.2", fmt="json")


def test_unknown_version(tmp_path):
    with pytest.raises(ValueError):
        write_scenario("healthy", tmp_path, version="2.5")


def test_stdlib_only():
    code = (
        "import sys; sys.path.insert(0, %r); import fixtures.synth_fr; "
        "assert 'torch' not in sys.modules" % str(ROOT)
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# ---------------------------------------------------------------- NCCL semantics


def _last(d: dict) -> dict:
    return d["entries"][-1]


def test_missing_rank_semantics(tmp_path):
    t = write_scenario("missing_rank", tmp_path, world_size=8, entries=30)
    dumps = dumps_in(tmp_path)
    (c,) = t["culprit_ranks"]
    seq = t["collective"]["seq"]
    assert _last(dumps[c])["state"] == "completed"
    for r in t["waiting_ranks"]:
        e = _last(dumps[r])
        assert e["state"] == "started" and e["collective_seq_id"] == seq
        assert e["time_discovered_completed_ns"] is None and e["retired"] is False
        assert e["process_group"] == ("0", "default_pg")
        assert dumps[r]["pg_status"]["0"]["last_enqueued_collective"] == seq
        assert dumps[r]["pg_status"]["0"]["last_completed_collective"] == seq - 1
    assert dumps[c]["pg_status"]["0"]["last_enqueued_collective"] == seq - 1
    for d in dumps.values():  # record ids count from 0 with no gaps when nothing wrapped
        assert [e["record_id"] for e in d["entries"]] == list(range(len(d["entries"])))
        assert all(e["state"] == "completed" for e in d["entries"][:-1])


def test_missing_dump_has_no_file(tmp_path):
    t = write_scenario("missing_dump", tmp_path, world_size=4)
    assert not (tmp_path / f"nccl_trace_rank_{t['culprit_ranks'][0]}").exists()
    assert len(dumps_in(tmp_path)) == 3


def test_mismatch_semantics(tmp_path):
    for name in ("collective_mismatch", "size_mismatch"):
        t = write_scenario(name, tmp_path / name, world_size=4)
        dumps = dumps_in(tmp_path / name)
        (c,) = t["culprit_ranks"]
        lasts = {r: _last(d) for r, d in dumps.items()}
        assert all(e["state"] == "started" for e in lasts.values())
        assert len({e["collective_seq_id"] for e in lasts.values()}) == 1
        if name == "collective_mismatch":
            assert lasts[c]["profiling_name"] == "nccl:broadcast"
            assert all(lasts[r]["profiling_name"] == "nccl:all_reduce" for r in lasts if r != c)
        else:
            assert lasts[c]["input_sizes"] == [[2048, 1000]]
            assert all(lasts[r]["input_sizes"] == [[2048, 1024]] for r in lasts if r != c)


def test_p2p_deadlock_semantics(tmp_path):
    t = write_scenario("p2p_deadlock", tmp_path, world_size=4)
    dumps = dumps_in(tmp_path)
    e0, e1 = _last(dumps[0]), _last(dumps[1])
    assert e0["profiling_name"] == "nccl:send 0->1" and e1["profiling_name"] == "nccl:send 1->0"
    for e in (e0, e1):
        assert e["state"] == "started" and e["is_p2p"] and e["p2p_seq_id"] == t["collective"]["seq"]
        # p2p entries carry the group's current collective seq (not a new one)
        assert e["collective_seq_id"] == dumps[0]["pg_status"]["0"]["last_completed_collective"]
    for r in (2, 3):
        assert _last(dumps[r])["profiling_name"] == "nccl:all_reduce"
        assert _last(dumps[r])["state"] == "started"


def test_pg_order_deadlock_semantics(tmp_path):
    t = write_scenario("pg_order_deadlock", tmp_path, world_size=4)
    dumps = dumps_in(tmp_path)
    a, b = t["collective"], t["other_collective"]
    e0, e1 = _last(dumps[0]), _last(dumps[1])
    assert (e0["process_group"][0], e0["collective_seq_id"], e0["state"]) == (
        a["pg"],
        a["seq"],
        "started",
    )
    assert (e1["process_group"][0], e1["collective_seq_id"], e1["state"]) == (
        b["pg"],
        b["seq"],
        "started",
    )
    assert not any(
        e["process_group"][0] == b["pg"] and e["collective_seq_id"] == b["seq"]
        for e in dumps[0]["entries"]
    )
    assert not any(
        e["process_group"][0] == a["pg"] and e["collective_seq_id"] == a["seq"]
        for e in dumps[1]["entries"]
    )


def test_ring_buffer_wrapped_windows(tmp_path):
    t = write_scenario("ring_buffer_wrapped", tmp_path, world_size=8, entries=60, buffer_size=16)
    dumps = dumps_in(tmp_path)
    ends = set()
    for d in dumps.values():
        ids = [e["record_id"] for e in d["entries"]]
        assert len(ids) == 16 and ids[0] > 0 and ids == list(range(ids[0], ids[0] + 16))
        ends.add(ids[-1])
    assert len(ends) == 3  # culprit, its tp peer, everyone else
    (c,) = t["culprit_ranks"]
    assert _last(dumps[c])["record_id"] == min(ends)


def test_healthy_coalesced_block(tmp_path):
    write_scenario("healthy", tmp_path, world_size=4)
    for d in dumps_in(tmp_path).values():
        ents = d["entries"]
        assert all(e["state"] == "completed" for e in ents if not e["is_p2p"])
        block = [e for e in ents if e["is_p2p"]]
        assert [e["profiling_name"].split()[0] for e in block] == [
            "nccl:send",
            "nccl:recv",
            "nccl:coalesced",
        ]
        assert len({e["p2p_seq_id"] for e in block}) == 1
        assert [e["state"] for e in block] == ["scheduled", "scheduled", "completed"]


def test_write_large_small(tmp_path):
    t = write_large(tmp_path, 32, entries=50, tp_size=8)
    dumps = dumps_in(tmp_path)
    assert len(dumps) == 32
    (c,) = t["culprit_ranks"]
    for r, d in dumps.items():
        assert len(d["entries"]) == 50
        assert [cfg["desc"] for cfg in d["pg_config"].values()].count("tp") == 1
        assert set(d["pg_status"]) == {"0", "1", "2"}
    assert _last(dumps[c])["state"] == "completed"
    for r in t["waiting_ranks"]:
        e = _last(dumps[r])
        assert e["state"] == "started" and e["collective_seq_id"] == t["collective"]["seq"]
        assert e["process_group"] == (t["collective"]["pg"], "tp")
    others = [r for r in dumps if r // 8 != c // 8]
    assert all(_last(dumps[r])["profiling_name"] == "nccl:_reduce_scatter_base" for r in others)


# ---------------------------------------------------------------- torch's own tools


@pytest.mark.skipif(not HAVE_TORCH, reason="torch not installed")
def test_torch_loader_reads_every_pickle_fixture():
    from torch.distributed.flight_recorder.components.loader import read_dump

    n = 0
    for d in sorted(NCCL_FIXTURES.iterdir()):
        for p in sorted(d.glob("nccl_trace_rank_*")):
            if p.suffix == ".json":
                continue
            got = read_dump("nccl_trace_rank_", str(p))
            assert got["rank"] == int(p.name.rsplit("_", 1)[1])
            assert got["entries"] and got["pg_config"]
            n += 1
    assert n > 40


def _torchfrtrace(d: Path, *extra: str) -> str:
    exe = shutil.which("torchfrtrace")
    cmd = [exe] if exe else [sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace"]
    p = subprocess.run(cmd + [str(d), *extra], capture_output=True, text=True, timeout=120)
    return p.stdout + p.stderr


@pytest.mark.skipif(not HAVE_TORCH, reason="torch not installed")
@pytest.mark.parametrize(
    "fixture, needles",
    [
        ("size_mismatch", ["SIZE_OR_SYNTAX_MISMATCH", "Culprit rank {c}"]),
        ("size_mismatch_v2.4", ["SIZE_OR_SYNTAX_MISMATCH", "Culprit rank {c}"]),
        ("collective_mismatch_v2.7", ["COLLECTIVE_TYPE_MISMATCH", "Culprit rank {c}"]),
        ("missing_rank", ["Not all ranks joining collective", "missing ranks: {{{c}}}"]),
        ("missing_rank_v2.2", ["missing ranks: {{{c}}}"]),
        ("ring_buffer_wrapped", ["missing ranks: {{{c}}}"]),
    ],
)
def test_torchfrtrace_reports_injected_fault(fixture, needles):
    d = NCCL_FIXTURES / fixture
    truth = json.loads((d / "expected.json").read_text())
    (c,) = truth["culprit_ranks"]
    out = _torchfrtrace(d)
    assert "Traceback" not in out, out[-2000:]
    for n in needles:
        assert n.format(c=c) in out, (n, out[-2000:])
    assert f"sequence number: {truth['collective']['seq']}" in out


@pytest.mark.skipif(not HAVE_TORCH, reason="torch not installed")
def test_torchfrtrace_refuses_missing_dump():
    out = _torchfrtrace(NCCL_FIXTURES / "missing_dump")
    c = json.loads((NCCL_FIXTURES / "missing_dump" / "expected.json").read_text())["culprit_ranks"][
        0
    ]
    assert f"Missing dump files from ranks {{{c}}}" in out


# ---------------------------------------------------------------- committed == regenerated


def test_committed_fixtures_match_regeneration(tmp_path):
    synth_fr.regenerate(tmp_path)
    expected_dirs = sorted(d for d, _s, _k in synth_fr.FIXTURES)
    committed = sorted(p.name for p in NCCL_FIXTURES.iterdir() if p.is_dir())
    assert committed == expected_dirs
    for d in expected_dirs:
        cmp = filecmp.dircmp(NCCL_FIXTURES / d, tmp_path / d)
        assert not cmp.left_only and not cmp.right_only, (d, cmp.left_only, cmp.right_only)
        _match, mismatch, errors = filecmp.cmpfiles(
            NCCL_FIXTURES / d, tmp_path / d, cmp.common_files, shallow=False
        )
        assert not mismatch and not errors, (d, mismatch, errors)


def test_every_scenario_has_a_committed_fixture():
    assert {s for _d, s, _k in synth_fr.FIXTURES} == set(SCENARIOS)
    assert (NCCL_FIXTURES / "README.md").read_text().count("BUILT") >= 1


def test_cli_scenario(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "fixtures" / "synth_fr.py"),
            "scenario",
            "size_mismatch",
            str(tmp_path),
            "--world-size",
            "4",
            "--version",
            "2.4",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(out.stdout)["kind"] == "size_mismatch"
    assert len(list(tmp_path.glob("nccl_trace_rank_*"))) == 4
    assert os.path.exists(tmp_path / "expected.json")


def test_write_large_c10_writer_same_dumps_memoized_like_c10(tmp_path):
    """writer="c10" gives the same objects as the pickle module, with c10's memo policy:
    each distinct string written once, every shared frame dict written once."""
    import pickletools

    write_large(tmp_path / "py", 16, entries=40, tp_size=8)
    write_large(tmp_path / "c10", 16, entries=40, tp_size=8, writer="c10")
    for r in (0, 11):
        name = f"nccl_trace_rank_{r}"
        a = pickle.loads((tmp_path / "py" / name).read_bytes())
        raw = (tmp_path / "c10" / name).read_bytes()
        assert pickle.loads(raw) == a
        ops = [(op.name, arg) for op, arg, _pos in pickletools.genops(raw)]
        assert ops[0] == ("PROTO", 2)
        strings = [arg for op, arg in ops if op == "BINUNICODE"]
        assert len(strings) == len(set(strings))  # memoized by value
        dict_ids: set[int] = set()
        n_dicts = 0

        def walk(o):
            nonlocal n_dicts
            if isinstance(o, dict):
                n_dicts += 1
                if id(o) in dict_ids:
                    return
                dict_ids.add(id(o))
                o = list(o.values())
            if isinstance(o, (list, tuple)):
                for x in o:
                    walk(x)

        walk(a)
        written = sum(1 for op, _ in ops if op == "EMPTY_DICT")
        assert written == len(dict_ids) < n_dicts  # shared frame dicts written once
