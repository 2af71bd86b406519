"""analyze on what each recorded fixture job left behind names its ground truth.

fixtures/recorded/<scenario>/ holds real evidence from real gloo jobs (FR dumps, stacks, logs);
fixtures/nccl/<scenario>/ holds NCCL-shaped dumps built from torch's format. expected.json is the
ground truth each scenario declares.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hangscope.analysis.engine import analyze
from hangscope.options import LoadOptions
from hangscope.sources.load import load_paths

ROOT = Path(__file__).resolve().parent.parent / "fixtures"
RECORDED = sorted(p for p in (ROOT / "recorded").iterdir() if (p / "expected.json").exists())
NCCL = sorted(p for p in (ROOT / "nccl").glob("*") if (p / "expected.json").exists()) \
    if (ROOT / "nccl").exists() else []


def _verdict(paths: list[Path]):
    evidence, _ = load_paths([str(p) for p in paths], LoadOptions())
    verdict, _ = analyze(evidence)
    return verdict


def _inputs(folder: Path, parts: tuple[str, ...]) -> list[Path]:
    return [folder / part for part in parts if (folder / part).exists()]


@pytest.mark.parametrize("folder", [p for p in RECORDED
                                    if json.loads((p / "expected.json").read_text()).get(
                                        "fr_has_evidence", True)
                                    # one snapshot of a job that still moves proves nothing
                                    and json.loads((p / "expected.json").read_text()).get(
                                        "outcome") in ("hang", "error")
                                    and (p / "fr" / "pickle").exists()
                                    and any((p / "fr" / "pickle").iterdir())],
                         ids=lambda p: p.name)
@pytest.mark.parametrize("form", ["pickle", "json"])
def test_fr_dumps_alone_name_the_culprit(folder: Path, form: str) -> None:
    truth = json.loads((folder / "expected.json").read_text())
    verdict = _verdict([folder / "fr" / form])
    if truth["kind"] in ("rank_died", "rank_oom", "init_hang", "dataloader_stall",
                         "python_deadlock", "straggler", None):
        # FR alone cannot say why; it must still point at the culprit when it can see one
        if verdict.findings and truth.get("culprit_ranks"):
            assert set(verdict.findings[0].culprit_ranks) <= set(truth["culprit_ranks"]) | set(
                range(truth["world_size"])) - set(truth.get("dump_ranks", []))
        return
    root = verdict.findings[0]
    assert root.kind.value == truth["kind"], root.summary
    assert root.culprit_ranks == truth["culprit_ranks"]
    if truth.get("collective"):
        got = root.collective
        assert (got.pg, got.seq) == (truth["collective"]["pg"], truth["collective"]["seq"])


def test_gloo_p2p_fr_says_it_holds_no_evidence() -> None:
    verdict = _verdict([ROOT / "recorded" / "p2p_deadlock" / "fr" / "pickle"])
    root = verdict.findings[0]
    assert root.kind.value == "missing_rank" and root.culprit_ranks == [0, 1]
    assert "gloo records no send/recv" in root.summary
    assert not any(f.kind.value == "p2p_deadlock" for f in verdict.findings)


HUNG_OR_FAILED = [p for p in RECORDED
                  if json.loads((p / "expected.json").read_text()).get("outcome") in ("hang",
                                                                                       "error")
                  # gloo's FR has no p2p records: without stacks nothing can show a p2p cycle
                  and ((p / "stacks").exists()
                       or json.loads((p / "expected.json").read_text()).get("fr_has_evidence",
                                                                            True))]


@pytest.mark.parametrize("folder", HUNG_OR_FAILED, ids=lambda p: p.name)
def test_everything_left_behind_names_the_root_cause(folder: Path) -> None:
    truth = json.loads((folder / "expected.json").read_text())
    verdict = _verdict(_inputs(folder, ("fr/pickle", "stacks", "logs", "os", "runtime")))
    if truth["kind"] is None:
        assert verdict.status.value in ("healthy", "slow")
        return
    root = verdict.findings[0]
    assert (root.kind.value, root.culprit_ranks) == (truth["kind"], truth["culprit_ranks"]), \
        root.summary


@pytest.mark.parametrize("folder", NCCL, ids=lambda p: p.name)
def test_nccl_shaped_dumps(folder: Path) -> None:
    truth = json.loads((folder / "expected.json").read_text())
    verdict = _verdict([folder])
    if truth.get("kind") in (None, "healthy"):
        assert not verdict.findings
        return
    root = verdict.findings[0]
    assert root.kind.value == truth["kind"], root.summary
    assert root.culprit_ranks == truth["culprit_ranks"]
    if truth.get("collective") and root.collective.pg == truth["collective"]["pg"]:
        # a culprit behind on several groups may be reported on the one most ranks wait in
        assert root.collective.seq == truth["collective"]["seq"]


@pytest.mark.parametrize("scenario, kind, culprits", [
    ("rank_oom", "rank_oom", [2]), ("rank_sigkill", "rank_died", [3]),
    ("rank_died", "rank_died", [1])])
def test_a_folder_of_rank_logs_alone_names_the_first_cause(scenario, kind, culprits) -> None:
    # the survivors' "Connection closed by peer" and torchrun's root-cause row (which names
    # rank 0 here) are echoes; the culprit's own OOM, signal or exception is the cause
    root = _verdict([ROOT / "recorded" / scenario / "logs"]).findings[0]
    assert (root.kind.value, root.culprit_ranks) == (kind, culprits), root.summary
