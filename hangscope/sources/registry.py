"""Bundle file kinds -> the loader that reads them. One place, so a bundle and a bare file of the
same format always go through the same code."""

from __future__ import annotations

from hangscope.bundle import register_loader

# Each of these registers the bundle kinds it owns when imported.
from hangscope.collect import procstate  # noqa: F401,E402  ("proc")
from hangscope.errors import BadInputError
from hangscope.model import JobEvidence
from hangscope.sources import (
    flight_recorder,
    pyspy,  # noqa: F401,E402  ("pyspy")
)
from hangscope.sources.logs import loader  # noqa: F401,E402  ("log")


@register_loader("fr")
def load_fr_file(path: str, rank: int | None, evidence: JobEvidence,
                 problems: list[str]) -> None:
    if rank is None:
        problems.append(f"{path}: a flight-recorder dump must belong to a rank")
        return
    try:
        dump, entry_problems = flight_recorder.load_dump(path, rank)
    except BadInputError as exc:
        problems.append(str(exc))
        return
    problems.extend(entry_problems[:20])
    evidence.rank(rank).fr = dump
