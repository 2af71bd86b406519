"""Merge bundles from several nodes (one ``hangscope collect`` each) into one job, by global rank.

A bundle holds the ranks its manifest lists under ``ranks`` (the processes it collected). The
merge:

- refuses a global rank that two bundles hold (``BadInputError``, one line naming both bundles
  and the rank): two processes claiming one rank are two jobs, or one node collected twice;
- reads each bundle through ``bundle.load_bundle``, once per real path; a job file (a launcher's
  output) that two bundles of one host both hold, from the same source file, is read once, from
  the larger copy, so that its lines are not counted twice;
- says, as evidence gaps, which ranks of ``0..world_size-1`` no bundle holds and which node was
  expected to hold them, from what the manifests record (``local_world_size``, ``group_rank`` or
  ``node_index``, ``expected_nodes``: see docs/bundle.md): with torchrun's contiguous ranks,
  node ``g`` holds ranks ``g*L .. g*L+L-1``;
- says when the bundles' collection windows (each host's own wall clock) lie further apart than
  ``CLOCK_SLACK_S``: collected at different times, or the hosts' clocks disagree by about that
  much, and times from different hosts compare only to within it;
- says when the bundles name different jobs or world sizes.

Gaps that a bundle carries are prefixed with its node's name when the bundles come from more
than one node.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from hangscope import bundle
from hangscope.errors import BadInputError
from hangscope.model import JobEvidence
from hangscope.ranges import format_ranks

CLOCK_SLACK_S = 1.0
MAX_BUNDLES = 100_000


@dataclass(slots=True)
class BundleInfo:
    """What the merge needs from one manifest (every field optional in older bundles)."""

    path: str
    manifest: dict[str, Any]
    ranks: dict[int, dict[str, Any]]
    host: str | None = None
    node: str | None = None
    job_id: str | None = None
    world_size: int | None = None
    local_world_size: int | None = None
    group: int | None = None  # the node's index in the job: group_rank, else node_index
    expected_nodes: list[str] = field(default_factory=list)
    window: tuple[float, float] | None = None  # wall clock at start and end of the collection
    offset: tuple[float, float] | None = None  # its clock minus the fan-out host's (low, high)

    @property
    def name(self) -> str:
        return self.node or self.host or os.path.basename(os.path.normpath(self.path))


@dataclass(slots=True)
class MergeReport:
    """What the merge found: each bundle, the ranks none holds, and its gaps (also added to the
    evidence)."""

    bundles: list[BundleInfo] = field(default_factory=list)
    ranks_missing: list[int] = field(default_factory=list)
    gaps: list[str] = field(default_factory=list)


def find_bundles(path: str) -> tuple[list[str], bool]:
    """Bundles at or under ``path`` (a bundle's own folders are not searched further), and
    whether ``path`` is itself one."""
    if bundle.is_bundle(path):
        return [path], True
    found: list[str] = []
    for root, dirs, _files in os.walk(path):
        dirs.sort()
        inner = [d for d in dirs if bundle.is_bundle(os.path.join(root, d))]
        found.extend(os.path.join(root, d) for d in inner)
        dirs[:] = [d for d in dirs if d not in inner]
        if len(found) > MAX_BUNDLES:
            raise BadInputError(path, f"more than {MAX_BUNDLES} bundles")
    return found, False


def read_info(path: str) -> BundleInfo:
    manifest = bundle.read_manifest(path)
    where = os.path.join(path, bundle.MANIFEST)
    ranks = manifest.get("ranks")
    if not isinstance(ranks, dict):
        raise BadInputError(where, "'ranks' is not a mapping")
    held = {int(key): entry for key, entry in ranks.items()
            if isinstance(key, str) and key.isdigit() and isinstance(entry, dict)}
    window = clock_window(manifest.get("clock"))
    measured = manifest.get("clock_offset_s")
    offset = None
    if isinstance(measured, dict) and _num(measured.get("low")) is not None \
            and _num(measured.get("high")) is not None \
            and float(measured["low"]) <= float(measured["high"]):
        offset = (float(measured["low"]), float(measured["high"]))
    hosts = manifest.get("hosts")
    host = _str(manifest.get("host")) or (
        str(hosts[0]) if isinstance(hosts, list) and len(hosts) == 1 else None)
    nodes = manifest.get("expected_nodes")
    group = _int(manifest.get("group_rank"))
    return BundleInfo(
        path=path, manifest=manifest, ranks=held, host=host, node=_str(manifest.get("node")),
        job_id=_str(manifest.get("job_id")), world_size=_int(manifest.get("world_size")),
        local_world_size=_int(manifest.get("local_world_size")),
        group=group if group is not None else _int(manifest.get("node_index")),
        expected_nodes=[str(n) for n in nodes] if isinstance(nodes, list) else [],
        window=window, offset=offset)


def clock_window(clock: Any) -> tuple[float, float] | None:
    """A manifest's ``clock``: (wall_start, wall_end) of the collection by its host's clock; the
    end is the start where it was not written."""
    if not isinstance(clock, dict):
        return None
    start, end = _num(clock.get("wall_start")), _num(clock.get("wall_end"))
    if start is None:
        return None
    return start, end if end is not None else start


def merge_bundles(paths: Iterable[str], evidence: JobEvidence,
                  problems: list[str]) -> MergeReport:
    """Load the bundles at ``paths`` into ``evidence``; see the module docstring."""
    report = MergeReport()
    seen: set[str] = set()
    for path in paths:
        real = os.path.realpath(path)
        if real not in seen:
            seen.add(real)
            report.bundles.append(read_info(path))
    infos = report.bundles
    _refuse_duplicates(infos)
    skips = _duplicate_job_files(infos)
    several_nodes = len({info.name for info in infos}) > 1
    for info in infos:
        bundle.load_bundle(info.path, evidence, problems, manifest=info.manifest,
                           skip_job_files=skips.get(info.path, frozenset()),
                           gap_prefix=f"[{info.name}] " if several_nodes else "")
    world = max([info.world_size or 0 for info in infos] + [evidence.world_size or 0])
    held = {rank for info in infos for rank in info.ranks}
    report.ranks_missing = sorted(set(range(world)) - held)
    report.gaps.extend(_agreement_gaps(infos))
    if report.ranks_missing:
        report.gaps.extend(missing_gaps(infos, report.ranks_missing, world,
                                        several=len(infos) > 1))
    else:
        report.gaps.extend(_silent_nodes(infos))
    report.gaps.extend(clock_gaps(infos))
    evidence.gaps.extend(report.gaps)
    return report


def _refuse_duplicates(infos: list[BundleInfo]) -> None:
    owner: dict[int, BundleInfo] = {}
    clashes: list[tuple[int, BundleInfo, BundleInfo]] = []
    for info in infos:
        for rank in sorted(info.ranks):
            first = owner.setdefault(rank, info)
            if first is not info:
                clashes.append((rank, first, info))
    if not clashes:
        return
    rank, first, second = clashes[0]
    more = len(clashes) - 1
    raise BadInputError(
        f"{first.path} and {second.path}",
        f"both hold rank {rank} ({_who(first, rank)}; {_who(second, rank)})"
        + (f", and {more} more rank{'s' if more > 1 else ''} clash" if more else "")
        + ": give each node's bundle once")


def _who(info: BundleInfo, rank: int) -> str:
    pid = _int(info.ranks[rank].get("pid"))
    return (f"pid {pid} " if pid is not None else "") + f"on {info.name}"


def _duplicate_job_files(infos: list[BundleInfo]) -> dict[str, frozenset[str]]:
    """Job files that more than one bundle of one host took from the same source file: keep
    the largest copy, skip the others (path -> listed paths to skip)."""
    best: dict[tuple[str, str], tuple[int, str, str]] = {}  # key -> (size, bundle, rel path)
    listed: list[tuple[tuple[str, str], str, str]] = []
    for info in infos:
        files = info.manifest.get("job_files")
        for item in files if isinstance(files, list) else []:
            if not isinstance(item, dict) or not item.get("source") or not item.get("path"):
                continue
            key = (info.host or "", str(item["source"]))
            rel = str(item["path"])
            try:
                size = os.path.getsize(os.path.join(info.path, rel))
            except OSError:
                size = -1
            listed.append((key, info.path, rel))
            if key not in best or size > best[key][0]:
                best[key] = (size, info.path, rel)
    skips: dict[str, set[str]] = {}
    for key, path, rel in listed:
        if best[key][1:] != (path, rel):
            skips.setdefault(path, set()).add(rel)
    return {path: frozenset(rels) for path, rels in skips.items()}


def missing_gaps(infos: list[BundleInfo], missing: list[int], world: int,
                 several: bool) -> list[str]:
    """Which node should have held each missing rank, as far as the manifests tell.

    With one local world size L across the bundles and every bundle's ranks inside its own
    node's block (``rank // L == group``), a missing rank r belongs to node block ``r // L``.
    A block some bundle came from lost ranks on that node (exited, or not searched: that
    bundle's own gaps say which); a block no bundle came from is a node that sent none, named
    from the job's node list where the bundles' places in it are known."""
    sizes = {info.local_world_size for info in infos}
    size = sizes.pop() if len(sizes) == 1 else None
    blocks = _blocks(infos, size)
    if size is None or blocks is None:
        held = "; ".join(f"{info.name}: ranks {format_ranks(sorted(info.ranks))}"
                         for info in infos if info.ranks)
        return [f"rank{'s' if len(missing) > 1 else ''} {format_ranks(missing)} of {world} "
                f"{'are' if len(missing) > 1 else 'is'} in no bundle ({held or 'no ranks'}); "
                "which node should hold them is not known (the manifests give no local world "
                "size and node rank)" + _unreported(infos)]
    by_block: dict[int, list[int]] = {}
    for rank in missing:
        by_block.setdefault(rank // size, []).append(rank)
    names = _node_names(infos, blocks)
    gaps = []
    for block, ranks in sorted(by_block.items()):
        what = (f"rank{'s' if len(ranks) > 1 else ''} {format_ranks(ranks)} "
                f"(local rank{'s' if len(ranks) > 1 else ''} "
                f"{format_ranks([r - block * size for r in ranks])} of node {block})")
        if block in blocks:
            if not several:
                continue  # one bundle: its own gaps already say which local ranks it lacks
            info = blocks[block]
            gaps.append(f"{what} {'are' if len(ranks) > 1 else 'is'} in no bundle: expected "
                        f"on {info.name}, whose bundle {info.path} holds ranks "
                        f"{format_ranks(sorted(info.ranks))} (see its gaps)")
        else:
            gaps.append(f"{what} {'are' if len(ranks) > 1 else 'is'} in no bundle: expected "
                        f"on {names.get(block) or _candidates(infos)}, which sent none")
    return gaps


def _blocks(infos: list[BundleInfo], size: int | None) -> dict[int, BundleInfo] | None:
    """node block -> the bundle that came from it, or None when a bundle's ranks are not one
    contiguous block of ``size`` (ranks not assigned torchrun's way)."""
    if not size:
        return None
    blocks: dict[int, BundleInfo] = {}
    for info in infos:
        found = {rank // size for rank in info.ranks}
        if len(found) > 1 or (info.group is not None and found and found != {info.group}):
            return None
        block = found.pop() if found else info.group
        if block is not None:
            if block in blocks and blocks[block].name != info.name:
                return None
            blocks.setdefault(block, info)
    return blocks


def _node_names(infos: list[BundleInfo], blocks: dict[int, BundleInfo]) -> dict[int, str]:
    """node block -> node name, from the job's node list when every bundle sits at its own
    block's place in it (node ``g`` is the list's ``g``-th name)."""
    lists = {tuple(info.expected_nodes) for info in infos if info.expected_nodes}
    if len(lists) != 1:
        return {}
    nodes = lists.pop()
    if any(block >= len(nodes) or nodes[block] != info.name for block, info in blocks.items()):
        return {}
    return dict(enumerate(nodes))


def _candidates(infos: list[BundleInfo]) -> str:
    silent = _silent_names(infos)
    if len(silent) == 1:
        return silent[0]
    if silent:
        return "one of " + ", ".join(silent[:8]) + (", ..." if len(silent) > 8 else "")
    return "a node that is not known (no node list in the manifests)"


def _silent_names(infos: list[BundleInfo]) -> list[str]:
    expected = [n for info in infos for n in info.expected_nodes]
    present = {info.name for info in infos} | {info.host for info in infos if info.host}
    return sorted(set(expected) - present, key=expected.index)


def _unreported(infos: list[BundleInfo]) -> str:
    silent = _silent_names(infos)
    return f"; nodes of the job without a bundle: {', '.join(silent)}" if silent else ""


def _silent_nodes(infos: list[BundleInfo]) -> list[str]:
    """Nodes in the job's node list that sent no bundle, said once even when no rank is known
    to be missing (the world size unknown)."""
    silent = _silent_names(infos)
    if not silent:
        return []
    return [f"no bundle from node{'s' if len(silent) > 1 else ''} "
            f"{', '.join(silent[:16])}{', ...' if len(silent) > 16 else ''} of the job's "
            f"{len({n for info in infos for n in info.expected_nodes})} nodes"]


def clock_gaps(infos: list[BundleInfo]) -> list[str]:
    """Nodes whose clocks a fan-out measured to be off by more than CLOCK_SLACK_S, and bundles
    whose collection windows lie more than CLOCK_SLACK_S apart (on corrected clocks where every
    bundle's offset was measured)."""
    gaps = [f"{info.name}'s clock is {_span(info.offset)} s "
            f"{'ahead of' if info.offset[0] > 0 else 'behind'} the clock of the host that "
            f"gathered the bundles (measured around its collection): times from {info.name} "
            "compare with other nodes' only after that correction"
            for info in infos if info.offset is not None
            and (info.offset[0] > CLOCK_SLACK_S or info.offset[1] < -CLOCK_SLACK_S)]
    timed = [info for info in infos if info.window is not None]
    if len(timed) < 2:
        return gaps
    if all(info.offset is not None for info in timed):
        return gaps + _corrected_window_gaps(timed)
    return gaps + _window_gaps(timed)


def _span(offset: tuple[float, float]) -> str:
    low, high = sorted(abs(v) for v in offset)
    return f"{low:.1f}-{high:.1f}" if f"{low:.1f}" != f"{high:.1f}" else f"{low:.1f}"


def _corrected_window_gaps(timed: list[BundleInfo]) -> list[str]:
    """Windows on the gathering host's clock: shifted by each offset's middle; the gap must
    exceed the slack plus the offsets' uncertainty to be said."""
    def shifted(info: BundleInfo) -> tuple[float, float, float]:
        assert info.window is not None and info.offset is not None
        middle, spread = sum(info.offset) / 2, (info.offset[1] - info.offset[0]) / 2
        return info.window[0] - middle, info.window[1] - middle, spread
    first_end = min(timed, key=lambda info: shifted(info)[1])
    last_start = max(timed, key=lambda info: shifted(info)[0])
    apart = shifted(last_start)[0] - shifted(first_end)[1]
    if apart <= CLOCK_SLACK_S + shifted(last_start)[2] + shifted(first_end)[2]:
        return []
    return [f"the collections of {first_end.name} and {last_start.name} are {apart:.1f} s apart "
            f"(clocks corrected by the offsets the fan-out measured): their stacks and states "
            f"are not of the same moment"]


def _window_gaps(timed: list[BundleInfo]) -> list[str]:
    first_end = min(timed, key=lambda info: info.window[1] if info.window else 0.0)
    last_start = max(timed, key=lambda info: info.window[0] if info.window else 0.0)
    assert first_end.window is not None and last_start.window is not None
    apart = last_start.window[0] - first_end.window[1]
    if apart <= CLOCK_SLACK_S:
        return []
    same_host = first_end.host is not None and first_end.host == last_start.host
    why = ("collected at different times" if same_host else
           "collected at different times, or the hosts' clocks disagree by about that much")
    return [f"the collections of {first_end.name} and {last_start.name} are {apart:.1f} s apart "
            f"by their hosts' clocks ({first_end.name} ended before {last_start.name} began): "
            f"{why}; their times compare only to within {apart:.1f} s"]


def _agreement_gaps(infos: list[BundleInfo]) -> list[str]:
    gaps = []
    jobs = {info.job_id for info in infos if info.job_id}
    if len(jobs) > 1:
        gaps.append("the bundles name different jobs (" + "; ".join(
            f"{info.name}: {info.job_id}" for info in infos if info.job_id)
            + "): merged by rank anyway; check that they belong together")
    worlds = {info.world_size for info in infos if info.world_size}
    if len(worlds) > 1:
        gaps.append(f"the bundles disagree on the world size ({sorted(worlds)}): the largest "
                    "is used")
    return gaps


def _num(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
