"""The sample reports fit a laptop's and a desktop's window: no horizontal page scroll at 1000 px
or 1400 px, and no table wider than the card that holds it."""

from __future__ import annotations

from pathlib import Path

import pytest

SAMPLES = sorted((Path(__file__).resolve().parents[2] / "reports").glob("*.html"))

# widest element inside a card, minus the card's own width, for every card; and the page's
_OVERFLOW = """() => {
  const page = document.documentElement.scrollWidth - window.innerWidth;
  const cards = [...document.querySelectorAll('section, .card, details')].map(card => {
    const over = card.scrollWidth - card.clientWidth;
    const style = getComputedStyle(card);
    const scrolls = style.overflowX === 'auto' || style.overflowX === 'scroll';
    return {id: card.id || card.className || card.tagName, over: scrolls ? 0 : over};
  }).filter(c => c.over > 1);
  return {page, cards};
}"""


@pytest.mark.parametrize("width", [1000, 1400])
def test_no_sample_report_overflows(browser, width: int) -> None:
    assert SAMPLES
    context = browser.new_context(viewport={"width": width, "height": 900})
    overflowing = {}
    try:
        page = context.new_page()
        for sample in SAMPLES:
            page.goto("file://" + str(sample), wait_until="load")
            found = page.evaluate(_OVERFLOW)
            if found["page"] > 0 or found["cards"]:
                overflowing[sample.name] = found
    finally:
        context.close()
    assert not overflowing, overflowing
