"""The self-contained HTML report: a payload built once from the verdict, rendered by jinja2."""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING, Any

import jinja2

from hangscope.ranges import format_ranks
from hangscope.report.redact import redact

if TYPE_CHECKING:
    from hangscope.pipeline import Result


@functools.lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    loader = jinja2.PackageLoader("hangscope.report", "templates")
    env = jinja2.Environment(loader=loader, autoescape=True, undefined=jinja2.StrictUndefined)
    env.policies["json.dumps_kwargs"] = {"sort_keys": True, "separators": (",", ":")}
    env.filters["ranks"] = format_ranks
    return env


def build_payload(result: Result, redact_secrets: bool = True) -> dict[str, Any]:
    verdict = result.verdict.to_json()
    if redact_secrets:
        verdict = redact(verdict)
    return {"verdict": verdict}


def write_report(result: Result, path: str, redact: bool = True) -> str:
    payload = build_payload(result, redact)
    html = environment().get_template("report.html").render(payload=payload,
                                                            verdict=payload["verdict"])
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(html)
    os.replace(tmp, path)
    return path
