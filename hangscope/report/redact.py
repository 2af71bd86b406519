"""Redact secrets that logs and environments leak into evidence, before anything is rendered.

Applied to every string of the report payload by default (``--no-redact`` turns it off): tokens
and passwords in URLs, ``KEY=value`` pairs whose key names a secret, bearer tokens, and well-known
token shapes (GitHub, Hugging Face, AWS, Slack).
"""

from __future__ import annotations

import re
from typing import Any

MASK = "[REDACTED]"
_PATTERNS = (
    # scheme://user:password@host -> keep the user, hide the password
    (re.compile(r"(?P<pre>\b[a-zA-Z][\w+.-]*://[^\s:/@]+:)[^\s@/]+(?=@)"), r"\g<pre>" + MASK),
    (re.compile(r"(?i)(?P<pre>\b[\w.-]*(?:token|secret|passw(?:or)?d|api[_-]?key|access[_-]?key"
                r"|credential|auth)[\w.-]*\s*[=:]\s*)(?P<q>['\"]?)[^\s'\",;]+"),
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
    """A copy of ``value`` (JSON-like) with every string redacted."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {key: redact(item) for key, item in value.items()}
    if isinstance(value, list):
        return [redact(item) for item in value]
    return value
