"""A recording's stacks carry the source lines they cite (``stacks/source-lines.json``, as a bundle
carries them): its analysis shows the lines the job had when it was recorded, not the job's file
as edited since, nor nothing on a machine where that path does not exist."""

from __future__ import annotations

from pathlib import Path

from hangscope.analysis.engine import analyze
from hangscope.options import LoadOptions
from hangscope.sources.load import load_paths
from hangscope.sources.source_lines import SCHEMA

RECORDED = Path(__file__).resolve().parent.parent / "fixtures" / "recorded"


def test_a_recordings_stacks_carry_the_lines_they_cite() -> None:
    # GIVEN the recorded stacks of slow_read_straggler, whose job file was changed after the
    # recording (rank 2's read_record: line 45 then, another line now)
    evidence, report = load_paths([str(RECORDED / "slow_read_straggler" / "stacks")], LoadOptions())
    # THEN the carried lines are loaded, line 45 as it was
    job = next(name for name in evidence.source_lines if name.endswith("slow_read_straggler.py"))
    assert "chunk = os.read(fd, left)" in evidence.source_lines[job][45]
    assert report.loaded.get("source_lines")
    # and the verdict cites the read by that line
    verdict = analyze(evidence)[0]
    cited = [e.detail for f in verdict.findings for e in f.evidence]
    assert any("chunk = os.read(fd, left)" in d for d in cited), cited


def test_every_recording_with_stacks_carries_its_lines() -> None:
    for stacks in sorted(RECORDED.glob("*/stacks")):
        assert (stacks / "source-lines.json").is_file(), stacks


def test_a_corrupt_source_lines_file_is_one_line_naming_it(tmp_path: Path) -> None:
    # GIVEN a file that says it is carried source lines and is not JSON
    bad = tmp_path / "source-lines.json"
    bad.write_text('{"schema": "' + SCHEMA + '", "files": {"/a.py": {"1": "x"}')
    evidence, report = load_paths([str(tmp_path)], LoadOptions())
    # THEN nothing is loaded from it and one problem names it
    assert evidence.source_lines == {}
    assert [p for p in report.problems if str(bad) in p] and len(report.problems) == 1
