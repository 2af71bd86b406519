"""The few errors hangscope raises to its user, and the exit codes a runbook can branch on.

Only ``cli.main`` catches these: it prints the one-line message (and the help paragraph, if any) and
returns ``exit_code``. Library code raises them and never prints or exits.
"""

from __future__ import annotations

import enum
from typing import ClassVar


class ExitCode(enum.IntEnum):
    """Documented in README.md; scripts depend on these values."""

    NO_HANG = 0  # analysis ran; nothing is hung or crashed (healthy, or only a slow rank)
    INCONCLUSIVE = 1  # analysis ran but the evidence cannot say
    BAD_INPUT = 2  # usage error or unreadable input (same as click's usage error)
    HANG_FOUND = 3  # a hang, deadlock or crash was found: see verdict.json
    COULD_NOT_COLLECT = 4  # attach found no rank or could not read any of them
    INTERNAL_ERROR = 70  # a bug in hangscope (EX_SOFTWARE)


class HangscopeError(Exception):
    exit_code: ClassVar[int] = ExitCode.BAD_INPUT
    help_text: ClassVar[str] = ""


class BadInputError(HangscopeError):
    """A file or folder the user gave cannot be used. The message always names it."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class UsageError(HangscopeError):
    """Options that cannot work together, caught before any work starts."""


class CollectError(HangscopeError):
    """Nothing could be collected from a live job."""

    exit_code = ExitCode.COULD_NOT_COLLECT
