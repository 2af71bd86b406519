"""One entry point for every rendering of a result: ``render(result, "html"|"text"|"json")``.

The three formats come from the same verdict: text from
:func:`hangscope.report.text.format_verdict`, JSON from :meth:`Verdict.to_json`, HTML from
:func:`hangscope.report.html.render_html`.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from hangscope.result import Result

Format = Literal["html", "text", "json"]
FORMATS: tuple[Format, ...] = ("html", "text", "json")


def render(result: Result, fmt: Format, path: str | None = None, *, redact: bool = True,
           color: bool = False) -> str:
    """The rendering as a string; also written to ``path`` (atomically) when given.

    ``redact`` applies to the HTML report (the verdict's own text is the tool's, not the
    job's). ``color`` adds ANSI styles to text output.
    """
    if fmt == "html":
        from hangscope.report.html import render_html

        out = render_html(result, redact=redact)
    elif fmt == "text":
        from hangscope.report.text import format_verdict

        out = "\n".join(format_verdict(result.verdict, color=color)) + "\n"
    elif fmt == "json":
        out = json.dumps(result.verdict.to_json(), indent=2) + "\n"
    else:
        raise ValueError(f"unknown report format {fmt!r}; expected one of {', '.join(FORMATS)}")
    if path is not None:
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(out)
        os.replace(tmp, path)
    return out
