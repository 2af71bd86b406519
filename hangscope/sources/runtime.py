"""A rank's runtime record (``ranks/<r>/runtime.json``, written by ``collect.runtime``) as
:class:`~hangscope.model.ConfigFact` items: ``python_version``, ``torch_version``,
``nccl_version``, ``lib:<name>`` (the mapped path) and ``env:<NAME>``. A record with
``env_read`` true says the whole allow-listed environment was read, so a variable it lacks was
unset in that rank. A bundle's record belongs to the rank of its folder; a bare one (a saved
``rank2.runtime.json``) names its rank in ``rank``."""

from __future__ import annotations

import json

from hangscope.model import ConfigFact, JobEvidence

RECORD_KIND = "runtime"
_MAX_BYTES = 4 << 20
_MAX_VALUE = 4096
_VERSIONS = ("python_version", "torch_version", "nccl_version")
_SCHEMA = b'"hangscope.runtime/1"'


def sniff_runtime(head: bytes) -> bool:
    """A runtime record: a JSON object whose first key is its schema."""
    return head.lstrip().startswith(b"{") and _SCHEMA in head[:128]


def load_runtime_file(path: str, rank: int | None, evidence: JobEvidence,
                      problems: list[str]) -> None:
    try:
        with open(path, "rb") as handle:
            record = json.loads(handle.read(_MAX_BYTES + 1)[:_MAX_BYTES])
    except (OSError, ValueError) as exc:
        problems.append(f"{path}: cannot read the runtime record ({exc})")
        return
    if not isinstance(record, dict):
        problems.append(f"{path}: a runtime record must be a JSON object")
        return
    if rank is None:  # a bare record: it names its rank
        rank = record.get("rank") if isinstance(record.get("rank"), int) else None
        if rank is None or rank < 0:
            problems.append(f"{path}: a runtime record must name its rank")
            return
    facts = [ConfigFact(key, str(record[key])[:_MAX_VALUE], "runtime", path)
             for key in _VERSIONS if isinstance(record.get(key), str)]
    for group, prefix in (("libraries", "lib:"), ("env", "env:")):
        items = record.get(group)
        if isinstance(items, dict):
            facts.extend(ConfigFact(prefix + str(name), str(value)[:_MAX_VALUE], "runtime", path)
                         for name, value in sorted(items.items()) if isinstance(value, str))
    ev = evidence.rank(rank)
    ev.config.extend(facts)
    ev.config_env_read = ev.config_env_read or record.get("env_read") is True
