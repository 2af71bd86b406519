"""Load pickles from untrusted hosts without running any of their code.

A flight-recorder pickle written by torch (2.4 to 2.13, NCCL and gloo) holds only dicts, lists,
tuples, strings, numbers, booleans and None: checked against the recorded dumps in ``fixtures/``,
whose opcodes never include GLOBAL, STACK_GLOBAL, REDUCE of an imported callable, or EXT. So the
allow-list of importable names is empty: any attempt to import a class or function (the way a
malicious ``__reduce__`` reaches ``os.system``) is refused before it can run, as is a persistent id.
The C unpickler stays in charge of everything else, so this costs nothing in speed.
"""

from __future__ import annotations

import io
import pickle
from typing import Any, NoReturn


class ForbiddenPickleError(pickle.UnpicklingError):
    """The pickle asked for a Python object outside the allow-list."""


class _RestrictedUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> NoReturn:
        raise ForbiddenPickleError(
            f"refused to import {module}.{name}: a flight-recorder dump holds only builtin types"
        )

    def persistent_load(self, pid: Any) -> NoReturn:
        raise ForbiddenPickleError("refused a persistent id: not a flight-recorder dump")


def loads(data: bytes) -> Any:
    """Unpickle ``data`` admitting builtin containers and scalars only.

    Raises ForbiddenPickleError for anything that would import code, and pickle.UnpicklingError,
    EOFError, ValueError etc. for corrupt data; callers turn both into a one-line error.
    """
    # Through a BufferedReader: the C unpickler prefetches from a stream that has peek() and
    # otherwise calls read() once per opcode (io.BytesIO has no peek): 2-4x slower
    return _RestrictedUnpickler(io.BufferedReader(io.BytesIO(data), max(len(data), 1))).load()
