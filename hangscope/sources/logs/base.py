# ruff: noqa: E501
"""The interface between the scanner and the per-family parsers.

Every family module exposes ``HANDLERS: list[tuple[bytes, Handler]]``: a cheap byte substring that
must occur in a line for the handler to be worth calling, and the handler. The scanner finds all
trigger substrings of a chunk with ONE combined regex, decodes only those lines, peels their prefixes
(:func:`common.parse_line`) and calls the handlers of the triggers found, in ``PRIORITY`` order; the
first handler that returns events wins the line (so a NCCL ``WARN`` line that also says "Connection
reset by peer" is a ``nccl_transport_error``, not a gloo event). Block formats (tracebacks, the
torchrun failure table, the desync report, RAS reports) read the following lines through
:class:`Follow` and may mark them consumed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from hangscope.model import LogEvent
from hangscope.sources.logs.common import Context, Line


class Follow:
    """The lines after the current one (already prefix-parsed), bounded in count and bytes."""

    def __init__(self, source: Callable[[], Iterator[Line]]) -> None:
        self._source = source
        self.consumed: set[int] = set()  # line numbers the scanner must not trigger on again

    def lines(self) -> Iterator[Line]:
        return self._source()

    def consume(self, line_no: int) -> None:
        self.consumed.add(line_no)


Handler = Callable[[Line, Context, Follow], list[LogEvent]]
