"""What differs between ranks: libraries, versions and collective settings, compared as evidence.

Signal: each rank's :class:`~hangscope.model.ConfigFact` items (its runtime record, read from
``/proc`` at collection) and its ``runtime_config`` log events (NCCL's version and environment
banners, torch's ``ProcessGroupNCCL environments`` line). Ranks are grouped by value for every
key; a key with two or more values among the ranks that state it is a difference.

What never counts: identity and per-rank paths are not collected or are dropped here
(``RANK``/``LOCAL_RANK``, hosts, pids, ``CUDA_VISIBLE_DEVICES`` (one GPU per local rank by design),
``NCCL_HOSTID`` (a host's name for NCCL), ``*_FILE``/``*_DIR`` settings that embed a rank or pid),
and a key on which three ranks or more each state a value of their own is an identity, not a
skew. A key only some ranks' logs mention is
unknown for the others, never a difference; an environment variable is "(unset)" only for ranks
whose environment was read whole at collection.

Use as evidence (:func:`explain`): when a finding's culprits share a configuration no other rank
has, the finding gets a context line citing the difference; where that finding is a disagreement the
setting explains (a rank inside ``init_process_group`` or a ``new_group`` the others never enter, a
rank missing from a collective), a ``config_skew`` finding naming the same ranks comes first, a
little more confident, and cites the other as what it explains. When no finding names a culprit but
the job is stuck, a ``config_skew`` finding names the odd group (the ranks outside the largest
group; none when the groups tie) at confidence 0.5, above the 0.3 of "someone is missing, which one
the evidence does not say". Known false positives: a heterogeneous cluster whose nodes differ on
purpose (another interface name per node type) reads as skew; the finding then says what differs and
the reader decides.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable

from hangscope.analysis.context import Context
from hangscope.analysis.verdict import (
    ConfigDifference,
    ConfigGroup,
    EvidenceItem,
    Finding,
    Kind,
)
from hangscope.model import JobEvidence
from hangscope.ranges import ranks_phrase
from hangscope.sources.logs.runtime_lines import KIND as LOG_KIND

UNSET = "(unset)"
# Disagreements a setting on the odd ranks explains: the finding says who, the setting says why.
EXPLAINED_BY_CONFIG = frozenset({Kind.INIT_HANG, Kind.MISSING_RANK})
CONFIDENCE = 0.5
CONFIDENCE_WITH_STATE = 0.7  # the odd ranks are also the only ones in their state
_IGNORED_ENV = frozenset({"CUDA_VISIBLE_DEVICES", "NCCL_RAS_ADDR", "NCCL_COMM_ID", "NCCL_HOSTID"})
# Three ranks or more that state a key, each with its own value: an identity (a host id, an
# address), not a setting some ranks got wrong.
_IDENTITY_MIN_RANKS = 3
_IGNORED_SUFFIXES = ("_FILE", "_DIR", "_PATH", "_FILE_NAME")
_LABELS = {"nccl_version": "NCCL version", "nccl_cuda": "NCCL built for CUDA",
           "cuda_driver_version": "CUDA driver version", "torch_version": "torch version",
           "python_version": "Python version", "nccl_network": "NCCL network",
           "nccl_net_devices": "NCCL network devices",
           "nccl_bootstrap_if": "NCCL bootstrap interface"}
Facts = dict[int, dict[str, tuple[str, str]]]  # rank -> key -> (value, where)


def label(key: str) -> str:
    """How a key reads in a sentence: ``NCCL version``, ``NCCL_SOCKET_IFNAME``,
    ``library libnccl``."""
    if key in _LABELS:
        return _LABELS[key]
    kind, _, name = key.partition(":")
    return {"env": name, "torch": f"{name} (torch)", "lib": f"library {name}"}.get(kind, key)


def gather(evidence: JobEvidence) -> Facts:
    """Every rank's settings: its runtime record first, then what its logs said."""
    facts: Facts = {}
    env_keys: set[str] = set()
    for rank, ev in evidence.ranks.items():
        mine: dict[str, tuple[str, str]] = {}
        for fact in ev.config:
            if _matters(fact.key):
                mine.setdefault(fact.key, (fact.value.strip(), fact.where))
        for event in ev.logs:
            if event.kind == LOG_KIND and _matters(key := str(event.fields.get("key", ""))):
                mine.setdefault(key, (str(event.fields.get("value", "")).strip(), event.where()))
        if mine:
            facts[rank] = mine
        if ev.config_env_read:
            env_keys.update(k for k in mine if k.startswith("env:"))
    for rank, mine in facts.items():
        if evidence.ranks[rank].config_env_read:
            where = next((f.where for f in evidence.ranks[rank].config), "")
            for key in env_keys - set(mine):
                mine[key] = (UNSET, where)
    return facts


def _matters(key: str) -> bool:
    if not key or key.startswith("torch:TORCH_NCCL_") and key.endswith(_IGNORED_SUFFIXES):
        return False
    if key.startswith(("env:", "torch:")):
        name = key.partition(":")[2]
        return name not in _IGNORED_ENV and not name.endswith(_IGNORED_SUFFIXES)
    return True


_ORDER = ("nccl_version", "nccl_cuda", "torch_version", "cuda_driver_version", "python_version",
          "lib:", "env:", "nccl_network", "nccl_net_devices", "nccl_bootstrap_if", "torch:")


def _rank_key(key: str) -> tuple[int, str]:
    """Versions first, then libraries, settings, transports, torch's effective values."""
    return next((i for i, p in enumerate(_ORDER) if key == p or key.startswith(p)
                 and p.endswith(":")), len(_ORDER)), key


def compare(facts: Facts) -> list[ConfigDifference]:
    """The keys on which the ranks that state them disagree, most-shared value first."""
    ranks = sorted(facts)
    keys = sorted({key for mine in facts.values() for key in mine}, key=_rank_key)
    out = []
    for key in keys:
        by_value: dict[str, list[int]] = defaultdict(list)
        where: dict[str, str] = {}
        shown_as: dict[str, str] = {}  # each compared value as the first rank's log wrote it
        for rank in ranks:
            if key in facts[rank]:
                shown, cited = facts[rank][key]
                value = _comparable(key, shown)
                by_value[value].append(rank)
                where.setdefault(value, cited)
                shown_as.setdefault(value, shown)
        if len(by_value) < 2 or _identity(by_value):
            continue
        groups = [ConfigGroup(shown_as[value], members, where[value])
                  for value, members in sorted(by_value.items(), key=lambda kv: (-len(kv[1]),
                                                                                  kv[1][0]))]
        unknown = [r for r in ranks if key not in facts[r]]
        out.append(ConfigDifference(key=key, groups=groups, unknown=unknown))
    return out


_OOB = re.compile(r"; OOB \S+$")


def _comparable(key: str, value: str) -> str:
    """What of a value can differ only by mistake: NCCL's out-of-band interface is a host's own
    name for its NIC (``ens7np0`` on one host, ``ens52np0`` on the next), not a setting."""
    return _OOB.sub("", value) if key == "nccl_net_devices" else value


def _identity(by_value: dict[str, list[int]]) -> bool:
    return (len(by_value) >= _IDENTITY_MIN_RANKS
            and all(len(members) == 1 for members in by_value.values()))


def signatures(facts: Facts, diffs: Iterable[ConfigDifference]) -> dict[int, tuple[str, ...]]:
    """Each rank's values on the differing keys: ranks with equal signatures share a config.
    Keys some ranks say nothing about are left out while others are known to every rank (a
    rank whose log lacks a banner is not odd for it)."""
    diffs = list(diffs)
    keys = [d.key for d in diffs if not d.unknown] or [d.key for d in diffs]
    return {rank: tuple(mine.get(key, ("?", ""))[0] for key in keys)
            for rank, mine in facts.items()}


def odd_ranks(sigs: dict[int, tuple[str, ...]]) -> list[int]:
    """Ranks outside the largest configuration group; none when the largest group ties."""
    groups: dict[tuple[str, ...], list[int]] = defaultdict(list)
    for rank, sig in sigs.items():
        groups[sig].append(rank)
    sizes = sorted((len(m) for m in groups.values()), reverse=True)
    if len(sizes) < 2 or sizes[0] == sizes[1]:
        return []
    biggest = max(groups.values(), key=len)
    return sorted(set(sigs) - set(biggest))


def describe(diff: ConfigDifference, limit: int = 3) -> str:
    """``NCCL version: 2.21.5 (ranks 0-2), 2.18.1 (rank 3)``."""
    parts = [f"{g.value} ({ranks_phrase(g.ranks)})" for g in diff.groups[:limit]]
    more = len(diff.groups) - limit
    return f"{label(diff.key)}: " + ", ".join(parts) + (f", and {more} more" if more > 0 else "")


def explain(ctx: Context, findings: list[Finding]) -> tuple[list[Finding], list[ConfigDifference]]:
    """Findings with the configuration differences as evidence, and the differences."""
    facts = gather(ctx.evidence)
    diffs = compare(facts)
    if not diffs:
        return findings, []
    sigs = signatures(facts, diffs)
    cited = False
    causes: list[Finding] = []
    for finding in findings:
        if finding.culprit_ranks and _alone_in_config(finding.culprit_ranks, sigs):
            if finding.kind in EXPLAINED_BY_CONFIG and not causes:
                causes.append(_as_cause(ctx, diffs, sigs, finding))
            _add_context(finding, diffs)
            cited = True
    findings = [*causes, *findings]
    if not cited and not any(f.culprit_ranks for f in findings) and _stuck(ctx, findings):
        findings = [*findings, _finding(ctx, diffs, sigs)]
    return findings, diffs


def _as_cause(ctx: Context, diffs: list[ConfigDifference], sigs: dict[int, tuple[str, ...]],
              effect: Finding) -> Finding:
    """The configuration as the cause of a disagreement whose culprits are the odd ranks: a rank
    that never joins, or creates groups the others do not, because it runs another setting."""
    cause = _finding(ctx, diffs, sigs)
    cause.culprit_ranks = list(effect.culprit_ranks)
    cause.waiting_ranks = list(effect.waiting_ranks)
    cause.confidence = min(0.95, max(cause.confidence, effect.confidence + 0.05))
    cause.summary += (f". It explains the {effect.kind.value.replace('_', ' ')} seen: "
                      f"{effect.summary.split(';')[0]}")
    return cause


def _alone_in_config(culprits: list[int], sigs: dict[int, tuple[str, ...]]) -> bool:
    """All culprits share one configuration that no other rank has."""
    theirs = {sigs.get(r) for r in culprits}
    if len(theirs) != 1 or None in theirs:
        return False
    sig = theirs.pop()
    return not any(s == sig for r, s in sigs.items() if r not in culprits)


def _add_context(finding: Finding, diffs: list[ConfigDifference]) -> None:
    culprits = set(finding.culprit_ranks)
    lines = [describe(d) for d in diffs if any(set(g.ranks) <= culprits for g in d.groups)] \
        or [describe(d) for d in diffs]
    finding.summary = (finding.summary.rstrip(".") + f"; {ranks_phrase(culprits)} also "
                       f"run{'s' if len(culprits) == 1 else ''} a configuration no other rank "
                       f"has ({'; '.join(lines[:2])})")
    finding.evidence.extend(_items(diffs))


def _items(diffs: list[ConfigDifference]) -> list[EvidenceItem]:
    """One cited line per value of each difference (the first rank of each group)."""
    return [EvidenceItem(source="config", rank=group.ranks[0],
                         detail=f"{label(diff.key)} {group.value} ({ranks_phrase(group.ranks)})",
                         where=group.where)
            for diff in diffs[:6] for group in diff.groups[:4]]


def _stuck(ctx: Context, findings: list[Finding]) -> bool:
    """Something is wrong that no finding pins on a rank: a finding without culprits, a pending
    flight-recorder op, or a rank sitting in a collective."""
    if findings:
        return True
    if any(ctx.picture.pending_ops(rank) for rank in ctx.picture.dumps):
        return True
    return any(s.main is not None and s.main.kind in ("collective", "p2p", "init")
               and s.progress != "moving" for s in ctx.stacks.values())


def _finding(ctx: Context, diffs: list[ConfigDifference],
             sigs: dict[int, tuple[str, ...]]) -> Finding:
    odd = odd_ranks(sigs)
    rest = sorted(set(sigs) - set(odd))
    what = "; ".join(describe(d) for d in diffs[:3])
    evidence = _items(diffs)
    state = _own_state(ctx, odd)
    if odd:
        summary = (f"{ranks_phrase(odd)} run{'s' if len(odd) == 1 else ''} a configuration no "
                   f"other rank has ({what})")
        if state:
            summary += f" and {'is' if len(odd) == 1 else 'are'} alone in {state}"
            evidence.extend(_state_items(ctx, odd, state))
    else:
        summary = f"the ranks run {len(set(sigs.values()))} different configurations ({what})"
    summary += (": ranks whose libraries or collective settings differ can wait forever on each "
                "other; make them agree")
    if len(diffs) > 3:
        summary += f" ({len(diffs) - 3} more differences in the table)"
    return Finding(kind=Kind.CONFIG_SKEW, culprit_ranks=odd, waiting_ranks=rest,
                   confidence=CONFIDENCE_WITH_STATE if state else CONFIDENCE, summary=summary,
                   evidence=evidence)


def _own_state(ctx: Context, odd: list[int]) -> str:
    """The state the odd ranks share and no other rank has (their rank class), if any."""
    if not odd:
        return ""
    classes = {ctx.graph.class_of.get(rank) for rank in odd}
    if len(classes) != 1 or None in classes:
        return ""
    cid = classes.pop()
    if cid is None or len(ctx.graph.members) < 2 \
            or sorted(ctx.graph.members.get(cid, [])) != sorted(odd):
        return ""
    return ctx.graph.states.get(cid, "")


def _state_items(ctx: Context, odd: list[int], state: str) -> list[EvidenceItem]:
    source = "py-spy" if odd[0] in ctx.stacks else "flight_recorder"
    return [EvidenceItem(source=source, rank=odd[0], detail=f"{ranks_phrase(odd)}: {state}")]
