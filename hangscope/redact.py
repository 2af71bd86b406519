"""Redact secrets that logs and environments leak into evidence, before anything leaves the machine.

Applied by default (``--no-redact`` turns it off) to every string of the report payload, of the
verdict (verdict.json and what is printed) and to the text files a collection copies into a
bundle (logs, process state; flight-recorder dumps are kept byte for byte): tokens
and passwords in URLs, ``KEY=value`` pairs whose key names a secret, bearer tokens, and well-known
token shapes (GitHub, Hugging Face, AWS, Slack).
"""

from __future__ import annotations

import dataclasses
import enum
import re
from typing import Any

MASK = "[REDACTED]"
_PATTERNS = (
    # scheme://user:password@host -> keep the user, hide the password
    # KEY=value, KEY: value; not file:line (``tokenizer.py:34``: a line number is no secret)
    (re.compile(r"(?P<pre>\b[a-zA-Z][\w+.-]*://[^\s:/@]+:)[^\s@/]+(?=@)"), r"\g<pre>" + MASK),
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


def redact(value: Any) -> Any:
    """A copy of ``value`` (JSON-like, or dataclasses such as the verdict) with every string
    redacted; enum members are kept as they are."""
    if isinstance(value, enum.Enum):
        return value
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {key: redact(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(redact(item) for item in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(value, **{f.name: redact(getattr(value, f.name))
                                             for f in dataclasses.fields(value) if f.init})
    return value


def redact_bytes(data: bytes) -> bytes:
    """``redact_text`` on a file's bytes; bytes that are not UTF-8 pass through unchanged."""
    text = data.decode("utf-8", "surrogateescape")
    redacted = redact_text(text)
    return data if redacted == text else redacted.encode("utf-8", "surrogateescape")
