from collections.abc import Sequence
from typing import Any

class Entries(Sequence[Any]):
    def __len__(self) -> int: ...
    def __getitem__(self, index: int) -> Any: ...  # type: ignore[override]

def read(data: bytes) -> tuple[dict[str, Any], Entries,
                               tuple[list[int], list[int], list[int], list[Any], bool,
                                     list[int]]] | None: ...
