"""Symmetric hangs: every rank sits in the same collective. What still differs names the odd rank
(FR's scheduled vs started, a GPU idle with flat power while its peers spin); where nothing does,
the verdict says so and what to collect next. Cases built by fixtures/symmetric/build.py."""

from __future__ import annotations

import json
import os

import pytest

from hangscope.analysis.engine import analyze
from hangscope.options import LoadOptions
from hangscope.sources.load import load_paths

HERE = os.path.join(os.path.dirname(__file__), "..", "fixtures", "symmetric")


def _case(name: str):  # type: ignore[no-untyped-def]
    with open(os.path.join(HERE, name, "expected.json"), encoding="utf-8") as handle:
        expected = json.load(handle)
    assert expected["provenance"].startswith("built")
    evidence, _ = load_paths([os.path.join(HERE, name)], LoadOptions())
    return analyze(evidence)[0], expected


@pytest.mark.parametrize("name", ["fr_not_started", "gpu_idle"])
def test_the_odd_rank_is_named(name: str) -> None:
    verdict, expected = _case(name)
    root = verdict.root
    assert root is not None, verdict.evidence_gaps
    assert (root.kind.value, root.culprit_ranks) == (expected["kind"], expected["culprit_ranks"])
    assert root.collective is not None and (root.collective.pg, root.collective.seq) == ("0", 10)
    others = sorted(set(range(4)) - set(expected["culprit_ranks"]))
    assert root.waiting_ranks == others
    assert all(item.where for item in root.evidence)


def test_gpu_idle_names_flat_power_and_cites_both_sides() -> None:
    verdict, _ = _case("gpu_idle")
    root = verdict.root
    assert root is not None
    assert "0% utilization in every reading with flat power" in root.summary
    assert [(i.source, i.rank) for i in root.evidence] == [("gpu", 1), ("gpu", 0)]
    assert "68.5 W" in root.evidence[0].detail and "over 2 reading(s)" in root.evidence[0].detail


def test_nothing_tells_them_apart_says_so_and_what_next() -> None:
    verdict, expected = _case("indistinguishable")
    assert verdict.findings == [] and verdict.status.value == "inconclusive"
    gap = next(g for g in verdict.evidence_gaps if "same collective" in g)
    assert expected["gap_has"] in gap
    assert "ncclras" in gap and "nvidia-smi" in gap
