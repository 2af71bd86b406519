"""The lowered twin of an ignore-case pattern (``sources/logs/casefold.py``) finds a line's
lowered text exactly where the pattern finds the line: on every line of the real-log corpus, for
every ignore-case bytes pattern the log scanners define."""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import pytest

import hangscope.sources.logs as logs_package
from hangscope.sources.logs.casefold import lowered_source, twin

REAL = Path(__file__).resolve().parent.parent / "fixtures" / "logs" / "real"


def _ignore_case_patterns() -> dict[str, re.Pattern[bytes]]:
    found = {}
    for info in pkgutil.iter_modules(logs_package.__path__):
        module = importlib.import_module(f"{logs_package.__name__}.{info.name}")
        for name, value in vars(module).items():
            if isinstance(value, re.Pattern) and isinstance(value.pattern, bytes) \
                    and value.flags & re.IGNORECASE:
                found[f"{info.name}.{name}"] = value
    return found


PATTERNS = _ignore_case_patterns()


@pytest.fixture(scope="module")
def corpus_lines() -> list[bytes]:
    lines: set[bytes] = set()
    for path in sorted(REAL.glob("*.log")):
        lines.update(path.read_bytes().split(b"\n"))
    return sorted(lines)


def test_the_scanners_candidate_words_are_among_the_patterns() -> None:
    # the candidates the tail's scanners test every line against, folded (a rename would
    # otherwise leave the check below with nothing to check)
    assert {"finish._CANDIDATE", "sizes._SIZE_WORDS", "rank_timings._CANDIDATE",
            "rank_positions._CANDIDATE", "work_counts._CANDIDATE", "collective_lines._OPS"
            } <= set(PATTERNS)


@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_a_twin_finds_the_lines_its_pattern_finds(name: str, corpus_lines: list[bytes]) -> None:
    pattern = PATTERNS[name]
    try:
        folded = twin(pattern)
    except ValueError:
        pytest.skip("no twin: lowering would change what it matches (never folded)")
    assert not folded.flags & re.IGNORECASE
    differ = [line for line in corpus_lines
              if bool(pattern.search(line)) != bool(folded.search(line.lower()))]
    assert differ == []


def test_escapes_and_group_names_keep_their_case() -> None:
    assert lowered_source(rb"(?i)\S+ (?P<Rank>RANK) \D[A-Z]\B") == \
        rb"\S+ (?P<Rank>rank) \D[a-z]\B"
    assert twin(re.compile(rb"(?i)Watchdog \S+")).search(b"[rank3]: watchdog caught")
    plain = re.compile(rb"Watchdog")
    assert twin(plain) is plain


@pytest.mark.parametrize("source", [rb"(?i)\x41BC", rb"(?i)(a)\1", rb"(?i)x(?s:.)y",
                                    rb"(?i)op(?-i:Send)"])
def test_what_lowering_would_change_is_refused(source: bytes) -> None:
    with pytest.raises(ValueError):
        lowered_source(source)
