"""The real-log corpus: logs users posted in public issue threads, analyzed as a user would.

Each ``fixtures/logs/real/<stem>.log`` is the lines exactly as posted; ``<stem>.json`` names the
thread and the expected verdict (kind, and culprit ranks where the thread names them). Every file
that hangscope gets right must stay right; the ones it misses today are listed in ``KNOWN_MISSES``
with why (reported as xfail). The score is in the README.
"""

from __future__ import annotations

import glob
import json
import os

import pytest

from hangscope.analysis.engine import analyze
from hangscope.options import LoadOptions
from hangscope.sources.load import load_paths

HERE = os.path.dirname(__file__)
REAL = os.path.join(HERE, "..", "fixtures", "logs", "real")
SAMPLES = os.path.join(HERE, "..", "fixtures", "logs")
CASES = sorted(os.path.basename(p)[:-4] for p in glob.glob(os.path.join(REAL, "*.log")))

# Pastes hangscope does not yet get right, and why (the README lists them too).
KNOWN_MISSES = {
    "b_pytorch_78514_gloo_closed_by_peer": "the one error line names the peer as an IP:port "
                                           "(18.25.6.30:30872), not a rank; rank 0 appears only "
                                           "as a literal argument in the user's source line "
                                           "'dist.recv(input,0)', and the traceback's header and "
                                           "the printing rank were trimmed off",
}


def _verdict(path: str):  # type: ignore[no-untyped-def]
    evidence, _ = load_paths([path], LoadOptions())
    verdict, _ = analyze(evidence)
    return verdict


def _expected(stem: str) -> dict[str, object]:
    with open(os.path.join(REAL, stem + ".json"), encoding="utf-8") as handle:
        meta = json.load(handle)
    assert meta["source"].startswith("https://github.com/"), f"{stem}: source must be the thread"
    return meta["expected"]  # type: ignore[no-any-return]


def test_corpus_is_big_enough() -> None:
    assert len(CASES) >= 40
    sources = {json.load(open(os.path.join(REAL, s + ".json")))["source"] for s in CASES}
    assert len(sources) == len(CASES), "each log must come from a thread of its own"


@pytest.mark.parametrize("stem", CASES)
def test_real_log_verdict(stem: str) -> None:
    if stem in KNOWN_MISSES:
        pytest.xfail(KNOWN_MISSES[stem])
    expected = _expected(stem)
    verdict = _verdict(os.path.join(REAL, stem + ".log"))
    assert verdict.root is not None, f"{stem}: no finding ({verdict.evidence_gaps[-1:]})"
    assert verdict.root.kind.value == expected["kind"], verdict.root.summary
    if expected.get("culprit_ranks") and stem not in CULPRIT_MISSES:
        assert sorted(verdict.root.culprit_ranks) == sorted(expected["culprit_ranks"])  # type: ignore[arg-type]
    # every finding cites where it read its evidence
    assert all(item.where for item in verdict.root.evidence), verdict.root.evidence


# Right kind, culprit not the one the thread names.
CULPRIT_MISSES: dict[str, str] = {}


def test_known_misses_exist() -> None:
    assert set(KNOWN_MISSES) <= set(CASES)


SIGNALS = ("Watchdog caught", "Timeout at", "Detected mismatch", "monitoredBarrier",
           "didn't join", "never joined", "store based barrier", "timed out")


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(SAMPLES, "*.log"))))
def test_no_sample_log_is_without_a_verdict(path: str) -> None:
    """A log that shows a timeout, a mismatch, a desync or a failed barrier never gets 'no usable
    evidence': at worst a finding with an unknown culprit and the next step."""
    with open(path, encoding="utf-8", errors="replace") as handle:
        text = handle.read()
    verdict = _verdict(path)
    if any(signal in text for signal in SIGNALS):
        assert verdict.findings, f"{path}: {verdict.evidence_gaps}"
    assert not any("no usable evidence" in gap for gap in verdict.evidence_gaps)
