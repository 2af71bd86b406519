"""A cheap first test for a large alternation of regexes: the literal words every match holds.

CPython's ``re`` tries every alternative at every place of a line. The cue words are some two
hundred alternatives, so their one combined regex cost about 1 ms per 130-character line: a
megabyte of a rank log's tail took seconds, and a job's worth of rank logs minutes, though nearly
every line holds none of them. Most alternatives require a literal word (``out of memory``,
``SIGSEGV``, ``Error`` of ``...Error: ``); a line that holds none of those words cannot match, so
one Aho-Corasick pass for the words (casefolded; ``ahocorasick_rs``, already a dependency) lets the
regex see only the few lines that might. Alternatives that require no word of at least
``MIN_WORD`` characters (``\\d%\\|``, a progress bar's) stay a small regex of their own.

The words are read off the pattern's parse tree (``re``'s own parser): a run of literal
characters in the alternative's top-level sequence, or in a group or a repeat of at least one
that the sequence must match, or one of each branch of a choice it must match; the longest
shortest word wins. Everything that does not force a character (classes, assertions, optional
parts) ends a run, so the words are always a subset of any match: the gate never turns away a
line the regex would match (``tests/test_logs_cue_gate.py`` checks this on every corpus line).
"""

from __future__ import annotations

import importlib
import re
from typing import Any

# re's own parser: ``re._parser`` since CPython 3.11, ``sre_parse`` before (and deprecated after)
_sre_parse: Any
_sre_constants: Any
try:
    _sre_parse = importlib.import_module("re._parser")
    _sre_constants = importlib.import_module("re._constants")
except ImportError:  # pragma: no cover - Python 3.10
    _sre_parse = importlib.import_module("sre_parse")
    _sre_constants = importlib.import_module("sre_constants")

_AhoCorasick: Any
try:
    from ahocorasick_rs import AhoCorasick as _AhoCorasick
except ImportError:  # pragma: no cover - exercised by forcing the fallback in tests
    _AhoCorasick = None

MIN_WORD = 3  # a shorter required literal is no word worth gating on ("%|", ": ")

_LITERAL = _sre_constants.LITERAL
_SUBPATTERN = _sre_constants.SUBPATTERN
_REPEATS = (_sre_constants.MAX_REPEAT, _sre_constants.MIN_REPEAT)
_BRANCH = _sre_constants.BRANCH


def required_words(pattern: str, flags: int = 0) -> list[list[str] | None]:
    """For each top-level alternative of ``pattern``: words one of which every match of it holds
    (casefolded), or None where it requires none of ``MIN_WORD`` characters."""
    items = list(_sre_parse.parse(pattern, flags))
    if len(items) == 1 and items[0][0] is _BRANCH:
        return [_sequence(list(branch)) for branch in items[0][1][1]]
    return [_sequence(items)]


def _sequence(items: list[tuple[Any, Any]]) -> list[str] | None:
    choices: list[list[str]] = []
    run: list[str] = []
    for op, arg in items:
        if op is _LITERAL:
            run.append(chr(arg))
            continue
        if run:
            choices.append(["".join(run)])
            run = []
        inner: list[str] | None = None
        if op is _SUBPATTERN:
            inner = _sequence(list(arg[-1]))
        elif op in _REPEATS and arg[0] >= 1:
            inner = _sequence(list(arg[2]))
        elif op is _BRANCH:
            inner = _choice(arg[1])
        if inner:
            choices.append(inner)
    if run:
        choices.append(["".join(run)])
    if not choices:
        return None
    best = max(choices, key=lambda words: (min(map(len, words)), -len(words)))
    if min(map(len, best)) < MIN_WORD:
        return None
    return [word.casefold() for word in best]


def _choice(branches: list[Any]) -> list[str] | None:
    words: list[str] = []
    for branch in branches:
        if (found := _sequence(list(branch))) is None:
            return None
        words.extend(found)
    return words


def _whole(pattern: str, flags: int) -> list[str] | None:
    """Words one of which every match of the whole ``pattern`` holds."""
    found = required_words(pattern, flags)
    if any(words is None for words in found):
        return None
    return [word for words in found if words for word in words]


class LiteralGate:
    """Which of ``patterns`` match a line, as each pattern's own regex would say, at the cost of
    a word search: an alternative's regex is tried only on lines that hold one of its words; the
    alternatives that require none are tried on every line (one small regex per pattern)."""

    def __init__(self, patterns: list[str], flags: int = 0) -> None:
        # (pattern index, alternative, its words or None)
        parts: list[tuple[int, str, list[str] | None]] = []
        for owner, pattern in enumerate(patterns):
            pieces = _split(pattern, flags)
            found = required_words(pattern, flags) if len(pieces) > 1 \
                else [_whole(pattern, flags)]
            parts.extend((owner, piece, words) for piece, words in zip(pieces, found))
        gated = [(owner, re.compile(piece, flags), words) for owner, piece, words in parts if words]
        self.words = sorted({word for _, _, words in gated for word in words})
        index = {word: i for i, word in enumerate(self.words)}
        # word -> the gated alternatives (pattern index, regex) that hold it
        self._holders: list[list[tuple[int, re.Pattern[str]]]] = [[] for _ in self.words]
        for owner, regex, words in gated:
            for word in words:
                self._holders[index[word]].append((owner, regex))
        rest: dict[int, list[str]] = {}
        for owner, piece, required in parts:
            if not required:
                rest.setdefault(owner, []).append(piece)
        self.rest = {owner: re.compile("|".join(f"(?:{piece})" for piece in pieces), flags)
                     for owner, pieces in rest.items()}
        self._search = _AhoCorasick(self.words) if _AhoCorasick is not None and self.words \
            else None

    def matching(self, line: str) -> list[int]:
        """The indices of the patterns that match ``line``, in order."""
        folded = line.casefold()
        if self._search is not None:  # (overlapping: a word inside another's match counts)
            hits = {found[0] for found in self._search.find_matches_as_indexes(folded,
                                                                              overlapping=True)}
        else:
            hits = {i for i, word in enumerate(self.words) if word in folded}
        found = {owner for owner, regex in self.rest.items() if regex.search(line)}
        for hit in hits:
            for owner, regex in self._holders[hit]:
                if owner not in found and regex.search(line):
                    found.add(owner)
        return sorted(found)


def _split(pattern: str, flags: int) -> list[str]:
    """``pattern``'s top-level alternatives as pattern strings, in ``required_words``' order; the
    whole pattern where its ``|`` cannot be told apart (then it is gated or kept as one)."""
    parts: list[str] = []
    depth, start, i, size = 0, 0, 0, len(pattern)
    while i < size:
        char = pattern[i]
        if char == "\\":
            i += 2
            continue
        if char == "[":  # a class: "|" and parentheses in it are its members
            i += 1
            i += pattern[i:i + 1] == "^"
            i += pattern[i:i + 1] == "]"
            while i < size and pattern[i] != "]":
                i += 2 if pattern[i] == "\\" else 1
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "|" and depth == 0:
            parts.append(pattern[start:i])
            start = i + 1
        i += 1
    parts.append(pattern[start:])
    if len(parts) != len(required_words(pattern, flags)):
        return [pattern]
    return parts
