"""The report's interning tables: each distinct string and frame is stored once in the payload
and referred to by index, which keeps a 1,000-rank report small."""

from __future__ import annotations

from hangscope.analysis.frames import is_library_frame
from hangscope.model import Frame
from hangscope.report.payload_types import FrameColumns


class Strings:
    """The string table: each distinct string once; ``-1`` stands for None."""

    def __init__(self) -> None:
        self.items: list[str] = []
        self._index: dict[str, int] = {}

    def __call__(self, text: str | None) -> int:
        if text is None:
            return -1
        found = self._index.get(text)
        if found is None:
            found = self._index[text] = len(self.items)
            self.items.append(text)
        return found


class Frames:
    """The frame table; frames are interned by value, their strings by the string table."""

    def __init__(self, strings: Strings) -> None:
        self.s = strings
        self.cols: FrameColumns = {"name": [], "file": [], "line": [], "lib": []}
        self._index: dict[Frame, int] = {}

    def __call__(self, frame: Frame) -> int:
        found = self._index.get(frame)
        if found is None:
            found = self._index[frame] = len(self.cols["name"])
            self.cols["name"].append(self.s(frame.name))
            self.cols["file"].append(self.s(frame.filename))
            self.cols["line"].append(frame.line)
            self.cols["lib"].append(int(is_library_frame(frame)))
        return found
