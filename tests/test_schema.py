"""The shipped JSON Schema of verdict.json (hangscope/schemas/verdict.schema.json) is exact:
the verdict of every fixture validates, and verdicts with a wrong kind, a missing key or a
non-integer rank do not. tests/verdict_schema.py validates every verdict.json the rest of the
suite writes."""

from __future__ import annotations

import copy
import glob
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from hangscope.analysis.verdict import SCHEMA, Kind, Status
from hangscope.cli import main
from hangscope.options import LoadOptions, OutputOptions
from hangscope.pipeline import analyze_paths
from hangscope.schema import load_schema, schema_text

pytest.importorskip("jsonschema")
from verdict_schema import problems, validator  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"


def _fixture_inputs() -> list[tuple[str, list[str]]]:
    """The evidence sets the fixture tests analyze: recorded jobs (as the sample reports read
    them, and their FR dumps as JSON), the built NCCL dumps, sample and real logs, the RAS
    reports and the recorded py-spy dumps."""
    sets: list[tuple[str, list[str]]] = []
    for folder in sorted((FIXTURES / "recorded").iterdir()):
        if not (folder / "expected.json").exists():
            continue
        inputs = [folder / p for p in ("fr/pickle", "logs") if (folder / p).is_dir()]
        inputs += sorted((folder / "stacks").glob("*.json"))
        sets.append((f"recorded/{folder.name}", [str(p) for p in inputs]))
        if (folder / "fr" / "json").is_dir():
            sets.append((f"recorded/{folder.name}/fr-json", [str(folder / "fr" / "json")]))
    sets += [(f"nccl/{p.name}", [str(p)]) for p in sorted((FIXTURES / "nccl").iterdir())
             if (p / "expected.json").exists()]
    logs = sorted(glob.glob(str(FIXTURES / "logs" / "*.log")))
    logs += sorted(glob.glob(str(FIXTURES / "logs" / "ras_report.*")))
    logs += sorted(glob.glob(str(FIXTURES / "logs" / "real" / "*.log")))
    sets += [(os.path.relpath(p, FIXTURES), [p]) for p in logs]
    stacks = sorted(glob.glob(str(FIXTURES / "stacks" / "recorded" / "*.json")))
    sets += [(os.path.relpath(p, FIXTURES), [p]) for p in stacks]
    return sets


FIXTURE_INPUTS = _fixture_inputs()


def test_the_fixture_set_is_the_whole_corpus() -> None:
    names = [name for name, _ in FIXTURE_INPUTS]
    assert sum(n.startswith("recorded/") and "/fr-json" not in n for n in names) >= 15
    assert sum(n.startswith("nccl/") for n in names) >= 10
    assert sum(n.startswith("logs/real/") for n in names) >= 40
    assert all(inputs for _, inputs in FIXTURE_INPUTS)


def test_every_fixture_verdict_validates(tmp_path: Path) -> None:
    # GIVEN every fixture, WHEN each is analyzed as `analyze --out` does (verdict.json only)
    bad: dict[str, list[str]] = {}
    statuses, kinds = set(), set()
    for number, (name, inputs) in enumerate(FIXTURE_INPUTS):
        out = tmp_path / str(number)
        analyze_paths(inputs, LoadOptions(), OutputOptions(write_html=False), str(out))
        doc = json.loads((out / "verdict.json").read_text())
        statuses.add(doc["status"])
        kinds.update(f["kind"] for f in doc["findings"])
        # THEN the written file validates against the shipped schema
        if found := problems(doc):
            bad[name] = found[:3]
    assert not bad, json.dumps(bad, indent=1)
    # and the corpus exercises the schema: most kinds and statuses occur
    assert len(kinds) >= 10 and len(statuses) >= 4, (kinds, statuses)


@pytest.fixture(scope="module")
def good() -> dict[str, Any]:
    """One real verdict with a finding, a collective and evidence: the base of the negatives."""
    inputs = dict(FIXTURE_INPUTS)["nccl/missing_rank"]
    doc = analyze_paths(inputs, LoadOptions(), OutputOptions(write_html=False), None) \
        .verdict.to_json()
    assert doc["findings"] and doc["findings"][0]["collective"] and doc["rank_classes"]
    assert problems(doc) == []
    return doc


def _broken(good: dict[str, Any], path: tuple[str | int, ...], value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(good)
    target = doc
    for key in path[:-1]:
        target = target[key]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return doc


_DELETE = object()


@pytest.mark.parametrize("path, value, expect", [
    (("findings", 0, "kind"), "deadlock", "findings/0/kind: 'deadlock' is not one of"),
    (("findings", 0, "culprit_ranks"), ["1"], "findings/0/culprit_ranks/0: '1' is not of type"),
    (("findings", 0, "culprit_ranks"), [1.5], "findings/0/culprit_ranks/0: 1.5 is not of type"),
    (("findings", 0, "culprit_ranks"), [-1], "findings/0/culprit_ranks/0: -1 is less than"),
    (("status",), "stuck", "status: 'stuck' is not one of"),
    (("schema",), "hangscope.verdict/2", "schema: 'hangscope.verdict/1' was expected"),
    (("findings", 0, "confidence"), 1.5, "findings/0/confidence: 1.5 is greater than"),
    (("findings", 0, "evidence", 0, "source"), "gdb", "findings/0/evidence/0/source: 'gdb'"),
    (("rank_classes", 0, "role"), "victim", "rank_classes/0/role: 'victim' is not one of"),
    (("findings", 0, "collective", "seq"), "10", "findings/0/collective"),
    (("world_size",), 0, "world_size: 0 is less than"),
    (("surprise",), 1, "(top): Additional properties are not allowed ('surprise'"),
    (("findings", 0, "measures"), {}, "findings/0/measures: {} should be non-empty"),
], ids=["kind", "rank-str", "rank-float", "rank-negative", "status", "version", "confidence",
        "source", "role", "seq", "world-size", "extra-key", "empty-measures"])
def test_schema_rejects(good: dict[str, Any], path: tuple[str | int, ...], value: Any,
                        expect: str) -> None:
    found = problems(_broken(good, path, value))
    assert any(line.startswith(expect) for line in found), found


@pytest.mark.parametrize("key", ["schema", "status", "world_size", "ranks_seen",
                                 "ranks_missing", "findings", "evidence_gaps", "rank_classes",
                                 "hangscope_version"])
def test_schema_rejects_a_missing_top_level_key(good: dict[str, Any], key: str) -> None:
    assert f"(top): '{key}' is a required property" in problems(_broken(good, (key,), _DELETE))


@pytest.mark.parametrize("key", ["kind", "culprit_ranks", "waiting_ranks", "collective",
                                 "confidence", "summary", "evidence"])
def test_schema_rejects_a_finding_without(good: dict[str, Any], key: str) -> None:
    found = problems(_broken(good, ("findings", 0, key), _DELETE))
    assert f"findings/0: '{key}' is a required property" in found, found


class TestSchemaMatchesTheCode:
    def test_enums_are_the_code_enums(self) -> None:
        schema = load_schema()
        assert set(schema["$defs"]["finding"]["properties"]["kind"]["enum"]) == \
            {k.value for k in Kind}
        assert set(schema["properties"]["status"]["enum"]) == {s.value for s in Status}

    def test_version_is_the_verdicts_own(self) -> None:
        schema = load_schema()
        assert schema["properties"]["schema"]["const"] == SCHEMA
        assert schema["$id"].endswith(f"/{SCHEMA}.schema.json")
        assert type(validator()).__name__ == "Draft202012Validator"

    def test_required_keys_are_what_to_json_always_writes(self, good: dict[str, Any]) -> None:
        schema = load_schema()
        assert set(schema["required"]) == set(good)
        finding = schema["$defs"]["finding"]
        assert set(finding["required"]) == set(good["findings"][0]) - {"measures"}


class TestSchemaCommand:
    def test_prints_the_shipped_file(self, capsys: pytest.CaptureFixture[str]) -> None:
        assert main(["schema"]) == 0
        out = capsys.readouterr().out
        assert out == schema_text()
        shipped = ROOT / "hangscope" / "schemas" / "verdict.schema.json"
        assert out == shipped.read_text(encoding="utf-8")
        assert json.loads(out)["$schema"] == "https://json-schema.org/draft/2020-12/schema"

    def test_through_the_real_entry_point(self) -> None:
        done = subprocess.run([sys.executable, "-m", "hangscope", "schema"], capture_output=True,
                              text=True, timeout=60, cwd=ROOT)
        assert done.returncode == 0 and done.stderr == ""
        assert json.loads(done.stdout)["properties"]["schema"]["const"] == SCHEMA


_SESSION_TEST = """
import json

def test_writes_a_verdict(tmp_path):
    doc = json.loads({good!r})
    doc.update({change!r})
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "verdict.json").write_text(json.dumps(doc))
"""


@pytest.mark.parametrize("change, fails", [({}, False), ({"status": "stuck"}, True)],
                         ids=["valid", "broken"])
def test_the_session_hook_fails_a_run_that_writes_a_bad_verdict(
        tmp_path: Path, good: dict[str, Any], change: dict[str, Any], fails: bool) -> None:
    # GIVEN a separate pytest session that loads the hook as tests/conftest.py does, and a
    # passing test in it that writes a verdict.json into its tmp_path
    (tmp_path / "conftest.py").write_text(textwrap.dedent(f"""
        import sys
        sys.path[:0] = [{str(ROOT)!r}, {str(ROOT / 'tests')!r}]
        from verdict_schema import (pytest_runtest_teardown, pytest_sessionfinish,
                                    pytest_terminal_summary)
    """))
    (tmp_path / "test_one.py").write_text(_SESSION_TEST.format(good=json.dumps(good),
                                                               change=change))
    # WHEN it runs
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "--rootdir", str(tmp_path), "-c", os.devnull,
                           "--basetemp", str(tmp_path / "base"), "-o",
                           "tmp_path_retention_policy=failed", str(tmp_path / "test_one.py")],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    # THEN the session fails, naming the file and what is wrong, only when the verdict is bad
    assert "1 passed" in done.stdout, done.stdout + done.stderr
    if fails:
        assert done.returncode == 1, done.stdout
        assert "do not match the shipped schema" in done.stdout
        assert "verdict.json (test_one.py::test_writes_a_verdict): status: 'stuck' is not one" \
            in done.stdout, done.stdout
    else:
        assert done.returncode == 0, done.stdout + done.stderr
