"""The committed sample reports in reports/ match what the current code renders."""

from __future__ import annotations

import filecmp
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from reports import regenerate  # noqa: E402


def test_sample_reports_are_up_to_date(tmp_path):
    # GIVEN the fixtures, WHEN every sample is rendered afresh
    fresh = regenerate.render_all(str(tmp_path))
    # THEN each committed page is byte-identical (run `python -m reports.regenerate` if not)
    stale = [os.path.basename(f) for f in fresh
             if not filecmp.cmp(f, os.path.join(regenerate.OUT, os.path.basename(f)),
                                shallow=False)]
    committed = {n for n in os.listdir(regenerate.OUT) if n.endswith(".html")}
    stale += sorted(committed - {os.path.basename(f) for f in fresh})
    assert not stale, f"stale sample reports, run `python -m reports.regenerate`: {stale}"


def test_samples_hold_no_absolute_temporary_paths():
    for name in os.listdir(regenerate.OUT):
        if name.endswith(".html"):
            text = open(os.path.join(regenerate.OUT, name), encoding="utf-8").read()
            assert "/tmp/" not in text and "pytest-of" not in text, name
