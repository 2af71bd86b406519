"""Redact secrets that logs and environments leak into evidence, before anything leaves the machine.

Applied by default (``--no-redact`` turns it off) to every string of the verdict before it is
written (verdict.json), printed (the terminal summary, ``--json``) or rendered, to the report
payload (which also quotes evidence the verdict does not), and to the text files a collection
copies into a bundle (flight-recorder dumps are kept byte for byte): tokens and passwords in URLs,
``KEY=value`` pairs whose key names a secret, bearer tokens, and well-known token shapes (GitHub,
Hugging Face, AWS, Slack).
"""

from __future__ import annotations

import dataclasses
import enum
import re
from typing import Any, TypeVar

T = TypeVar("T")

MASK = "[REDACTED]"
_PATTERNS = (
    # scheme://user:password@host -> keep the user, hide the password
    (re.compile(r"(?P<pre>\b[a-zA-Z][\w+.-]*://[^\s:/@]+:)[^\s@/]+(?=@)"), r"\g<pre>" + MASK),
    # KEY=value, KEY: value; not file:line (``tokenizer.py:34``: a line number is no secret)
    (re.compile(r"(?i)(?P<pre>\b[\w.-]*(?:token|secret|passw(?:or)?d|api[_-]?key|access[_-]?key"
                r"|credential|auth)[\w.-]*\s*(?:=|:(?!\d+\b))\s*)(?P<q>['\"]?)[^\s'\",;]+"),
     r"\g<pre>\g<q>" + MASK),
    (re.compile(r"(?i)\b(bearer|basic)\s+[a-z0-9._~+/=-]{8,}"), r"\1 " + MASK),
    (re.compile(r"\b(?:ghp|gho|ghu|ghs|ghr|github_pat)_[A-Za-z0-9_]{20,}"), MASK),
    (re.compile(r"\bhf_[A-Za-z0-9]{20,}"), MASK),
    (re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), MASK),
    (re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}"), MASK),
)


def redact_text(text: str) -> str:
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def redact_bytes(data: bytes) -> bytes:
    """``redact_text`` on a file's bytes; bytes that are not UTF-8 pass through unchanged."""
    text = data.decode("utf-8", "surrogateescape")
    redacted = redact_text(text)
    return data if redacted == text else redacted.encode("utf-8", "surrogateescape")


def redact(value: Any) -> Any:
    """A copy of ``value`` (JSON-like) with every string redacted."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {key: redact(item) for key, item in value.items()}
    if isinstance(value, list):
        return [redact(item) for item in value]
    return value


def redact_all(value: T) -> T:
    """A copy of ``value`` (the verdict: dataclasses, lists, dicts) with every string redacted;
    enum members (kinds, statuses) stay what they are."""
    if isinstance(value, enum.Enum):
        return value
    if isinstance(value, str):
        return redact_text(value)  # type: ignore[return-value]
    if isinstance(value, list):
        return [redact_all(item) for item in value]  # type: ignore[return-value]
    if isinstance(value, tuple):
        return tuple(redact_all(item) for item in value)  # type: ignore[return-value]
    if isinstance(value, dict):
        return {key: redact_all(item) for key, item in value.items()}  # type: ignore[return-value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {f.name: redact_all(getattr(value, f.name))
                   for f in dataclasses.fields(value) if f.init}
        return dataclasses.replace(value, **changes)
    return value

