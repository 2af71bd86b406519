"""The rendered page: self-contained, CSP-locked, data embedded once, deterministic."""

from __future__ import annotations

import base64
import hashlib
import html
import json
import re

import pytest
from report_factories import HOSTILE, evidence, result_of

from hangscope.report.html import environment, render_html
from hangscope.report.payload import build_payload
from hangscope.report.render import render


@pytest.fixture(scope="module")
def result():
    return result_of(evidence(hostile=True))


@pytest.fixture(scope="module")
def page(result):
    return render_html(result)


def data_of(page: str):
    blocks = re.findall(r'<script id="report-data" type="application/json">(.*?)</script>', page,
                        re.S)
    assert len(blocks) == 1
    return json.loads(blocks[0])


class TestPage:
    def test_payload_is_embedded_once_and_round_trips(self, result, page):
        assert page.count('id="report-data"') == 1
        assert data_of(page) == json.loads(json.dumps(build_payload(result)))

    def test_hostile_strings_cannot_close_the_data_script(self, page):
        # GIVEN frame names, log lines and group names containing "</script><img ...>"
        # THEN the only "</script>" are our own two closing tags and no <img tag appears
        assert page.count("</script>") == 2
        assert "<img" not in page
        assert HOSTILE in json.dumps(data_of(page))

    def test_no_external_resources(self, page):
        assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:|//)""", page, re.I)
        assert "@import" not in page and "url(http" not in page

    def test_csp_allows_exactly_the_inline_script_and_style(self, page):
        found = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', page)
        csp = html.unescape(found.group(1))
        assert "default-src 'none'" in csp and "unsafe-inline" not in csp
        style = re.search(r"<style>(.*?)</style>", page, re.S).group(1)
        script = re.findall(r"<script>(.*?)</script>", page, re.S)
        assert len(script) == 1

        def digest(text):
            return "sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()

        assert digest(style) in csp and digest(script[0]) in csp

    def test_javascript_never_uses_innerhtml(self):
        source = environment().loader.get_source(environment(), "report.js")[0]
        assert "innerHTML" not in source and "insertAdjacentHTML" not in source
        assert "eval(" not in source and "document.write" not in source

    def test_rendering_is_deterministic(self, result, page):
        assert render_html(result) == page

    def test_templates_use_inheritance_and_strict_undefined(self):
        env = environment()
        assert env is environment()  # cached
        assert env.undefined.__name__ == "StrictUndefined" and env.autoescape
        assert "{% extends \"base.html\" %}" in env.loader.get_source(env, "report.html")[0]


class TestRender:
    @pytest.mark.parametrize("fmt", ["html", "text", "json"])
    def test_every_format_renders_and_writes(self, result, fmt, tmp_path):
        path = tmp_path / f"out.{fmt}"
        out = render(result, fmt, str(path))
        assert path.read_text(encoding="utf-8") == out
        assert "missing_rank" in out

    def test_json_is_the_verdict(self, result):
        assert json.loads(render(result, "json")) == result.verdict.to_json()

    def test_text_is_the_terminal_summary(self, result):
        assert render(result, "text").startswith("hangscope: HANG\n")

    def test_unknown_format_is_refused(self, result):
        with pytest.raises(ValueError, match="unknown report format"):
            render(result, "pdf")  # type: ignore[arg-type]
