"""The HTML report in a real headless Chromium: loads offline, names the culprit, stays inert."""

from __future__ import annotations

import os
import time

import pytest
from report_factories import HOSTILE, HOSTILE_ATTR, evidence, large_evidence, result_of

from hangscope.options import LoadOptions, OutputOptions
from hangscope.pipeline import analyze_evidence
from hangscope.report.html import write_report
from hangscope.sources.load import load_paths

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = [  # (inputs relative to the repo, culprit text the headline must show)
    ("recorded/missing_rank", ["fixtures/recorded/missing_rank/fr/pickle"], "rank 2"),
    ("recorded/collective_mismatch", ["fixtures/recorded/collective_mismatch/fr/pickle"], "rank 3"),
    ("nccl/p2p_deadlock", ["fixtures/nccl/p2p_deadlock"], "ranks 0,1"),
    ("nccl/pg_order_deadlock", ["fixtures/nccl/pg_order_deadlock"], "ranks 0,1"),
    ("nccl/missing_rank", ["fixtures/nccl/missing_rank"], "rank 5"),
]


def report_for(inputs: list[str], out: str) -> str:
    evidence_, _ = load_paths([os.path.join(ROOT, p) for p in inputs], LoadOptions())
    result = analyze_evidence(evidence_, OutputOptions(write_html=False), None)
    return write_report(result, out)


@pytest.mark.parametrize("name,inputs,culprit", FIXTURES, ids=[f[0] for f in FIXTURES])
def test_fixture_report_loads_offline_and_names_the_culprit(visit, tmp_path, name, inputs, culprit):
    # GIVEN the report of a recorded hang, opened from file://
    seen = visit(report_for(inputs, str(tmp_path / "report.html")))
    page = seen.page
    # THEN the page ran cleanly, fetched nothing and shows the culprit up top
    assert seen.errors == [] and seen.requests == []
    assert page.locator("#facts .culprit dd").first.inner_text() == culprit
    assert page.locator("#verdict").inner_text().strip()
    assert page.locator("svg#waitgraph g.node").count() >= 2
    assert page.locator("#class-table tbody tr").count() >= 2
    # WHEN the culprit's box in the graph is clicked THEN its detail opens
    page.locator("svg#waitgraph g.node.role-culprit").first.click()
    detail = page.locator("#detail")
    assert detail.is_visible()
    assert detail.locator("h3").first.inner_text().startswith("Rank ")
    assert "culprit" in detail.locator("h3").first.inner_text()
    assert detail.locator("table").count() >= 1  # flight-recorder entries
    seen.shot(name.replace("/", "-"))


def test_hostile_strings_render_as_inert_text(visit, tmp_path):
    # GIVEN markup in frame names, thread names, log lines, pg names and wchan
    path = str(tmp_path / "report.html")
    write_report(result_of(evidence(hostile=True)), path)
    seen = visit(path)
    page = seen.page
    # WHEN every rank's detail is opened
    for rank in range(4):
        page.locator("#filter").fill(str(rank))
        page.locator("#class-table tbody tr:not([hidden])").first.click()
        page.locator(f"#detail .picker button:text-is('{rank}')").click()
        assert page.locator("#detail").inner_text().startswith(f"Rank {rank}")
    page.locator("#joblogs-sec").scroll_into_view_if_needed()
    # THEN nothing executed, no element came from data, and the text shows as typed
    assert seen.dialogs == []
    assert page.evaluate("document.querySelectorAll('img').length") == 0
    assert seen.errors == [] and seen.requests == []
    text = page.locator("body").inner_text()
    assert HOSTILE in text and HOSTILE_ATTR in text
    assert "hunter2secret" not in text  # redacted by default
    seen.shot("hostile")


def test_filter_finds_a_rank_and_sorting_reorders(visit, tmp_path):
    path = report_for(["fixtures/nccl/missing_rank"], str(tmp_path / "report.html"))
    page = visit(path).page
    page.locator("#filter").fill("5")
    rows = page.locator("#class-table tbody tr:not([hidden])")
    assert rows.count() == 1 and rows.first.locator("td").first.inner_text() == "5"
    page.locator("#filter").fill("")
    page.locator("#class-table th[data-key=count]").click()
    first = page.locator("#class-table tbody tr").first.locator("td").nth(1).inner_text()
    assert first == "1"


def test_4096_rank_report_opens_fast(visit, tmp_path):
    # GIVEN a 4096-rank hang (everyone waits on rank 2051)
    path = str(tmp_path / "report.html")
    write_report(result_of(large_evidence()), path)
    assert os.path.getsize(path) < 10_000_000
    # WHEN it is opened THEN it is drawn well under 3 s and names the culprit
    started = time.monotonic()
    seen = visit(path)
    seen.page.locator("#facts .culprit dd").first.wait_for()
    elapsed = time.monotonic() - started
    assert seen.errors == []
    assert seen.page.locator("#facts .culprit dd").first.inner_text() == "rank 2051"
    # WHEN a rank without its own detail is asked for THEN its class's representative stands in
    seen.page.locator("#filter").fill("4000")
    seen.page.locator("#class-table tbody tr:not([hidden])").first.click()
    seen.page.locator("#detail .picker input").fill("4000")
    seen.page.locator("#detail .picker input").dispatch_event("change")
    detail = seen.page.locator("#detail").inner_text()
    assert detail.startswith("Rank 4000") and "showing rank 0" in detail
    assert elapsed < 3.0, elapsed
    seen.shot("large-4096")


def test_log_only_report_draws_the_log_waits_and_cites_their_lines(visit, tmp_path):
    # GIVEN a report drawn from one desync report log, no dump and no stack
    seen = visit(report_for(["fixtures/logs/desync_report.log"], str(tmp_path / "report.html")))
    page = seen.page
    assert seen.errors == [] and seen.requests == []
    # THEN the culprit the log names heads it, and the wait graph holds the log's waits
    assert page.locator("#facts .culprit dd").first.inner_text() == "rank 3"
    assert page.locator("svg#waitgraph g.node").count() >= 2
    assert "desync_report.log:" in page.locator("svg#waitgraph").inner_html()
    # WHEN the culprit's box is clicked THEN its detail cites the log line it came from
    page.locator("svg#waitgraph g.node.role-culprit").first.click()
    detail = page.locator("#detail")
    assert detail.is_visible()
    assert "desync_report.log:13" in detail.inner_text()
    seen.shot("logs-desync_report")


def test_what_differs_between_ranks_shows_only_when_they_differ(visit, tmp_path):
    from hangscope.model import ConfigFact

    skew = sorted(f"fixtures/logs/config_skew/{n}" for n in os.listdir(
        os.path.join(ROOT, "fixtures/logs/config_skew")) if n.startswith("nccl_version_skew"))
    same = [p.replace("nccl_version_skew", "homogeneous") for p in skew]
    # GIVEN the two-rank logs on different NCCL builds, one value carrying markup
    evidence_, _ = load_paths([os.path.join(ROOT, p) for p in skew], LoadOptions())
    evidence_.rank(0).config.append(ConfigFact("env:NCCL_SOCKET_IFNAME", HOSTILE, "runtime"))
    evidence_.rank(1).config.append(ConfigFact("env:NCCL_SOCKET_IFNAME", "eth0", "runtime"))
    path = write_report(analyze_evidence(evidence_, OutputOptions(write_html=False), None),
                        str(tmp_path / "skew.html"))
    seen = visit(path)
    page = seen.page
    # THEN the table is there, versions first, the markup inert text
    assert seen.errors == [] and seen.requests == [] and seen.dialogs == []
    assert page.locator("#config-sec").is_visible()
    rows = page.locator("#config-table tbody tr")
    assert rows.count() == 5
    assert rows.first.inner_text().startswith("NCCL version")
    assert "2.18.1" in rows.first.inner_text()
    assert HOSTILE in page.locator("#config-table").inner_text()
    assert page.evaluate("document.querySelectorAll('img').length") == 0
    seen.shot("config-skew")
    # AND on ranks that agree the section stays hidden
    same_page = visit(report_for(same, str(tmp_path / "same.html"))).page
    assert not same_page.locator("#config-sec").is_visible()
    assert same_page.locator("#config-table tbody tr").count() == 0


def test_evidence_gaps_show_three_and_fold_the_rest(visit, tmp_path):
    # GIVEN a verdict with seven gap lines
    result = result_of(evidence())
    result.verdict.evidence_gaps = [f"gap number {i}" for i in range(7)]
    seen = visit(write_report(result, str(tmp_path / "report.html")))
    page = seen.page
    # THEN three are shown and four are folded away until asked for
    assert page.locator("#gap-list li").count() == 3
    folded = page.locator("#gaps details.gap-more")
    assert folded.locator("summary").inner_text() == "4 more"
    assert not folded.locator("li").first.is_visible()
    folded.locator("summary").click()
    assert folded.locator("li").count() == 4 and folded.locator("li").first.is_visible()
