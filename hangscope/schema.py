"""The JSON Schema of ``verdict.json``, shipped as package data (``hangscope/schemas/``).

``hangscope schema`` prints it; the test suite validates every verdict it writes against it
(tests/conftest.py). Read with :mod:`importlib.resources`, so it works from a wheel, a zip or an
editable install alike. hangscope itself never validates at run time: the verdict is built from
typed dataclasses (``analysis/verdict.py``), and the schema is for the scripts that read it.
"""

from __future__ import annotations

import json
from importlib.resources import files
from typing import Any

VERDICT_SCHEMA = "verdict.schema.json"


def schema_text(name: str = VERDICT_SCHEMA) -> str:
    """The schema file as shipped, byte for byte."""
    return (files("hangscope") / "schemas" / name).read_text(encoding="utf-8")


def load_schema(name: str = VERDICT_SCHEMA) -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(schema_text(name))
    return schema
