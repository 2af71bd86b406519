"""Read a small JSON evidence file of a known schema: one problem line naming the file, else the
document."""

from __future__ import annotations

import json
import os
from typing import Any


def read_schema_file(path: str, schema: str, max_bytes: int, what: str,
                     problems: list[str]) -> dict[str, Any] | None:
    """The decoded object whose ``schema`` is ``schema``; None (and one problem) otherwise."""
    try:
        if os.path.getsize(path) > max_bytes:
            problems.append(f"{path}: {what} larger than {max_bytes >> 20} MiB, skipped")
            return None
        with open(path, "rb") as handle:
            doc = json.loads(handle.read())
    except (OSError, ValueError, UnicodeDecodeError, RecursionError) as exc:
        problems.append(f"{path}: unreadable {what} ({type(exc).__name__})")
        return None
    if not isinstance(doc, dict) or doc.get("schema") != schema:
        problems.append(f"{path}: not a {schema} file")
        return None
    return doc
