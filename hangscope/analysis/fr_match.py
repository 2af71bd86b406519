"""What must agree across ranks for one collective to match, and what one record must satisfy.

The rules are those of torch's own analyzer (``torch/distributed/flight_recorder/components/
types.py``, ``Op.match`` and ``Op.dtype_mismatch``), stated per op instead of per pair:

- the op names agree (``COLLECTIVE_TYPE_MISMATCH``);
- input sizes agree, except where inputs legitimately differ per rank (``scatter``: only the root
  has inputs; all_to_all and the ``_v`` ops: uneven splits); output sizes agree, except for
  ``gather`` (only the root has outputs) and the uneven ops (``SIZE_OR_SYNTAX_MISMATCH``);
- input dtypes agree (not for ``scatter``, ``broadcast``), output dtypes agree (not for
  ``gather``), wherever the rank recorded a tensor (``COLLECTIVE_DTYPE_MISMATCH``).

One record alone can contradict its op (torch's "syntax" half of ``SIZE_OR_SYNTAX_MISMATCH``): an
in-place ``all_reduce`` whose output shape is not its input shape; an all-gather whose outputs do
not hold ``group size`` times its input elements, a reduce-scatter whose inputs do not hold
``group size`` times its output elements (counted over every tensor, so the list form, the
flattened form and gloo's stacked form all pass); input and output dtypes that differ where the op
cannot convert. These are checked only where the group's size is declared by the dumps.

Known differences from torch, on purpose: the all-gather rule counts every output tensor, where
torch 2.13 reads only the first (and so rejects every list-form ``all_gather`` of a real job); a
dtype given as a bare string is one dtype, where torch compares the string's characters.
"""

from __future__ import annotations

import math

from hangscope.model import FrEntry

# Ops whose per-rank sizes legitimately differ: only the group's sum could be checked.
UNEVEN_OPS = frozenset({"all_to_all", "all_to_all_single", "all_to_all_v_single", "all_gather_v",
                        "reduce_scatter_v"})
_NO_INPUT_SIZES = UNEVEN_OPS | {"scatter"}
_NO_OUTPUT_SIZES = UNEVEN_OPS | {"gather"}
_NO_INPUT_DTYPES = frozenset({"scatter", "broadcast"})
_NO_OUTPUT_DTYPES = frozenset({"gather"})
_CONVERTING = frozenset({"scatter", "gather", "broadcast"})
_IN_PLACE = frozenset({"all_reduce", "allreduce_coalesced"})
_GATHERS = frozenset({"all_gather", "_all_gather_base", "all_gather_base",
                      "all_gather_into_tensor", "all_gather_into_tensor_coalesced"})
_SCATTERS = frozenset({"reduce_scatter", "_reduce_scatter_base", "reduce_scatter_tensor",
                       "reduce_scatter_tensor_coalesced"})

MatchKey = tuple[object, ...]


def _recorded(sizes: tuple[tuple[int, ...], ...]) -> bool:
    """Did the rank record a tensor here? ``[[]]`` and ``[]`` are "no tensor" (a gather's
    non-root outputs)."""
    return bool(sizes) and bool(sizes[0])


def match_key(entry: FrEntry) -> MatchKey:
    """What must be equal on every rank for this op to match (see the module docstring)."""
    op = entry.op
    has_in, has_out = _recorded(entry.input_sizes), _recorded(entry.output_sizes)
    return (
        op,
        None if op in _NO_INPUT_SIZES else entry.input_sizes,
        None if op in _NO_OUTPUT_SIZES else entry.output_sizes,
        entry.input_dtypes if has_in and op not in _NO_INPUT_DTYPES else None,
        entry.output_dtypes if has_out and op not in _NO_OUTPUT_DTYPES else None,
    )


def differs_in(a: FrEntry, b: FrEntry) -> str:
    """Which part of two unmatched records differs first: "op", "input sizes", "output sizes",
    "input dtypes" or "output dtypes" (the torch MatchState each maps to is in the docstring)."""
    names = ("op", "input sizes", "output sizes", "input dtypes", "output dtypes")
    for name, x, y in zip(names, match_key(a), match_key(b)):
        if x != y:
            return name
    return ""


def _numel(sizes: tuple[tuple[int, ...], ...]) -> int:
    return sum(math.prod(shape) for shape in sizes)


def invalid(entry: FrEntry, group_size: int | None) -> str:
    """Why this one record contradicts its op, or "" (``group_size``: declared members, if known).
    """
    op = entry.op
    ins, outs = entry.input_sizes, entry.output_sizes
    if op in _IN_PLACE and _recorded(ins) and _recorded(outs) and ins != outs:
        return (f"an in-place {op} recorded input {_fmt(ins)} and output {_fmt(outs)}: "
                "it cannot change its tensor's shape")
    if group_size and _recorded(ins) and _recorded(outs):
        if op in _GATHERS and _numel(outs) != _numel(ins) * group_size:
            return (f"{op} gathers {_numel(ins)} elements from each of {group_size} ranks into "
                    f"{_numel(outs)} (expected {_numel(ins) * group_size})")
        if op in _SCATTERS and _numel(ins) != _numel(outs) * group_size:
            return (f"{op} scatters {_numel(ins)} elements over {group_size} ranks into "
                    f"{_numel(outs)} each (expected {_numel(ins) // group_size})")
    if op not in _CONVERTING and _recorded(ins) and _recorded(outs) \
            and entry.input_dtypes and entry.output_dtypes \
            and set(entry.input_dtypes) != set(entry.output_dtypes):
        return (f"{op} recorded input dtype {','.join(entry.input_dtypes)} and output dtype "
                f"{','.join(entry.output_dtypes)}: it does not convert")
    return ""


def _fmt(sizes: tuple[tuple[int, ...], ...]) -> str:
    return str([list(shape) for shape in sizes])
