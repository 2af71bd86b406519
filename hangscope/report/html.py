"""The self-contained HTML report: payload built once, pictures drawn in Python, jinja2 renders.

One page, no network: CSS and JS are inlined from ``templates/`` and allowed by a
Content-Security-Policy that names their SHA-256 hashes (no ``unsafe-inline``, no external
source of any kind). The data goes in once, as JSON in ``<script type="application/json">``
(``tojson`` escapes ``<``, ``>``, ``&`` and ``'``), and the page's script draws it with
``textContent`` only. Output is deterministic: same evidence, same bytes.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import os
from typing import TYPE_CHECKING, Any

import jinja2
from markupsafe import Markup

from hangscope import __version__
from hangscope.ranges import format_ranks
from hangscope.redact import redact_text
from hangscope.report.payload import build_payload
from hangscope.report.payload_types import Payload
from hangscope.report.svg import wait_graph_svg
from hangscope.report.timeline import timeline_svg

if TYPE_CHECKING:
    from hangscope.result import Result

__all__ = ["build_payload", "environment", "prepare", "render_html", "write_report",
           "write_index"]


@functools.lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    loader = jinja2.PackageLoader("hangscope.report", "templates")
    env = jinja2.Environment(loader=loader, autoescape=True, undefined=jinja2.StrictUndefined)
    env.policies["json.dumps_kwargs"] = {"sort_keys": True, "separators": (",", ":")}
    env.filters["ranks"] = format_ranks
    return env


@functools.lru_cache(maxsize=8)
def asset(name: str) -> Markup:
    """A static file from ``templates/``, to be inlined verbatim (it is ours, not data)."""
    env = environment()
    assert env.loader is not None
    source = env.loader.get_source(env, name)[0]
    return Markup(source)


def prepare() -> None:
    """Compile the report's template and read its assets now (both are cached), so that
    ``attach`` does it while py-spy works rather than after."""
    environment().get_template("report.html")
    asset("report.css")
    asset("report.js")


def _sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def csp(style: str, script: str | None) -> str:
    """Allow exactly our inline style and script; nothing else may load or connect."""
    script_src = _sha256(script) if script is not None else "'none'"
    return (f"default-src 'none'; style-src {_sha256(style)}; script-src {script_src}; "
            "img-src data:; base-uri 'none'; form-action 'none'")


def _title(payload: Payload) -> str:
    status = payload["summary"]["status"].upper()
    if payload["findings"]:
        root = payload["findings"][0]
        who = root["culprits"] or "?"
        return f"{status}: {root['kind']} - culprit rank(s) {who}"
    return status


def render_html(result: Result, redact: bool = True) -> str:
    """The whole page as a string."""
    payload = build_payload(result, redact_secrets=redact)
    text = redact_text if redact else str
    css, js = asset("report.css"), asset("report.js")
    return environment().get_template("report.html").render(
        payload=payload, title=_title(payload), version=__version__, css=css, js=js,
        csp=csp(css, js), graph_svg=wait_graph_svg(result.context.graph, result.verdict, text),
        timeline_svg=timeline_svg(result, text))


def _write(path: str, text: str) -> str:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8", newline="\n") as handle:
        handle.write(text)
    os.replace(tmp, path)
    return path


def write_report(result: Result, path: str, redact: bool = True) -> str:
    return _write(path, render_html(result, redact))


def write_index(path: str, reports: list[dict[str, Any]]) -> str:
    """A page listing sample reports: ``reports`` rows have file, name, status, culprits,
    headline, source."""
    css = asset("report.css")
    html = environment().get_template("index.html").render(
        reports=reports, version=__version__, css=css, csp=csp(css, None))
    return _write(path, html)
