"""Weighing: where competing explanations meet, one named rule at a time.

Every detector reports what its evidence supports, each finding with its own rule, basis and
confidence. Findings then compete: a cause and the waits it explains, a rank the stacks show moving
and a dump that says it never joined, a straggler the logs reported and a hang the stacks show now.
Each rule below settles one such contest and says why (``Weigh.basis``); ``weigh`` applies them in
order, ranking the findings after each rule that asks for it (``order_findings``: confidence, then
specificity). A new way two explanations compete is a new rule here, not another pass in the engine.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from hangscope.analysis import config_skew, dump_skew
from hangscope.analysis.context import Context
from hangscope.analysis.detectors.weak_cues import weigh as weigh_cues
from hangscope.analysis.moved_since_dump import reconcile
from hangscope.analysis.ras_facts import is_ras_evidence
from hangscope.analysis.thread_causes import cite_dead_threads
from hangscope.analysis.verdict import ConfigDifference, Finding, Kind, order_findings

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Weigh:
    name: str
    basis: str  # why the rule settles its contest this way, in a sentence
    apply: Callable[[Context, list[Finding], list[str]], list[Finding]]
    then_order: bool = True  # rank the findings again after it


def weigh(ctx: Context, findings: list[Finding],
          gaps: list[str]) -> tuple[list[Finding], list[ConfigDifference]]:
    """The detectors' findings weighed against each other by ``RULES``, in order; ``gaps`` takes
    what a rule explains away. Returns the findings, first the root cause, and the configuration
    differences between ranks (rule ``config-explains``)."""
    differences: list[ConfigDifference] = []

    def explain(ctx: Context, found: list[Finding], gaps: list[str]) -> list[Finding]:
        found, diffs = config_skew.explain(ctx, found)
        differences.extend(diffs)
        return found

    for rule in (*RULES[:_CONFIG_AT], Weigh("config-explains", CONFIG_BASIS, explain),
                 *RULES[_CONFIG_AT:]):
        before = [(f.kind, f.confidence) for f in findings]
        findings = rule.apply(ctx, findings, gaps)
        if rule.then_order:
            findings = order_findings(findings)
        if log.isEnabledFor(logging.DEBUG) and before != [(f.kind, f.confidence) for f in findings]:
            log.debug("weighing rule %s: %s", rule.name, [(f.kind.value, f.confidence)
                                                          for f in findings])
    return findings, differences


def _cues(ctx: Context, findings: list[Finding], gaps: list[str]) -> list[Finding]:
    return weigh_cues(findings)


def _cite_threads(ctx: Context, findings: list[Finding], gaps: list[str]) -> list[Finding]:
    cite_dead_threads(ctx, findings)
    return findings


def _pure(step: Callable[[list[Finding]], list[Finding]]) -> Callable[
        [Context, list[Finding], list[str]], list[Finding]]:
    return lambda ctx, findings, gaps: step(findings)


def _moving_not_hung(findings: list[Finding]) -> list[Finding]:
    """A straggler finding says every rank moved over the samples. A hang read from the same
    stacks alone (no group, no seq: one moment of a moving job where some ranks sat in a
    collective) contradicts it and goes; hangs with FR or log evidence stay."""
    if not _job_seen_moving(findings):
        return findings
    return [f for f in findings if f.kind is Kind.STRAGGLER or not from_stacks_alone(f)]


def _live_over_log_tail(ctx: Context, findings: list[Finding],
                        gaps: list[str]) -> list[Finding]:
    """A rank whose log stops a step behind the others' (rules ``stream-behind``,
    ``absent-from-round``, any reading of the log alone) reads as missing only if the job was
    stuck when the log ended. Logs collected from a job that still moves end mid-round as a
    matter of course (one rank has not printed its line yet): where the samples saw every rank
    move (a straggler read from live stacks or CPU time) and the rank's own stacks were sampled,
    they say where it is, and a log-only missing rank that no finding from stacks or dumps
    blames goes. A stuck job's last round is final: there the reading stays."""
    if not _job_seen_moving(findings):
        return findings

    def from_logs(finding: Finding) -> bool:
        return bool(finding.evidence) and all(item.source == "log" for item in finding.evidence)
    blamed = {rank for f in findings if not from_logs(f) for rank in f.culprit_ranks}

    def overtaken(finding: Finding) -> bool:
        return finding.kind is Kind.MISSING_RANK and from_logs(finding) \
            and bool(finding.culprit_ranks) and not set(finding.culprit_ranks) & blamed \
            and all(rank in ctx.stacks for rank in finding.culprit_ranks)
    return [f for f in findings if not overtaken(f)]


def _stuck_over_slow(findings: list[Finding]) -> list[Finding]:
    """A straggler the logs reported (step times printed earlier) never comes before a hang the
    stacks show now (ranks that wait for another): the logs say how the job ran, the stacks
    where it is."""
    if not findings or findings[0].kind is not Kind.STRAGGLER or _seen_moving(findings[0]):
        return findings
    stuck = [f for f in findings[1:] if f.kind is not Kind.STRAGGLER and f.waiting_ranks
             and any(item.source == "py-spy" for item in f.evidence)]
    if not stuck:
        return findings
    return stuck + [f for f in findings if f not in stuck]


def _job_seen_moving(findings: list[Finding]) -> bool:
    """A straggler read from live samples: every rank moved over them."""
    return any(f.kind is Kind.STRAGGLER and _seen_moving(f) for f in findings)


def _seen_moving(finding: Finding) -> bool:
    """A straggler read from live samples (stacks, CPU time), not from what logs said earlier."""
    return any(item.source in ("py-spy", "proc") for item in finding.evidence)


def _one_straggler(findings: list[Finding]) -> list[Finding]:
    """Straggler findings that name the same ranks (from samples, from dumps of a moving job,
    from the logs' step times) are one finding: the most certain keeps its text and takes the
    others' evidence and measures; each further, independent view adds 0.05."""
    kept: list[Finding] = []
    for finding in findings:
        same = next((f for f in kept if f.kind is Kind.STRAGGLER and finding.kind is Kind.STRAGGLER
                     and f.culprit_ranks == finding.culprit_ranks), None)
        if same is None:
            kept.append(finding)
            continue
        base, other = (same, finding) if same.confidence >= finding.confidence else (finding, same)
        cited = {(item.source, item.rank, item.where) for item in base.evidence}
        base.evidence.extend(item for item in other.evidence
                             if (item.source, item.rank, item.where) not in cited)
        for name, value in other.measures.items():
            base.measures.setdefault(name, value)
        base.summary = base.summary.rstrip(".") + "; also: " + other.summary
        base.confidence = min(0.95, round(base.confidence + 0.05, 2))
        kept[kept.index(same)] = base
    return kept


def from_stacks_alone(finding: Finding) -> bool:
    return finding.collective is not None and finding.collective.pg is None \
        and all(item.source in ("py-spy", "proc") for item in finding.evidence)


def _drop_generic(findings: list[Finding]) -> list[Finding]:
    """A missing_rank finding adds nothing when a more specific one names the same culprits
    (the DataLoader stall, deadlock or death that explains why they are missing). What NCCL RAS
    said about them moves to that finding: as a second, independent view it adds 0.05."""
    # a straggler the logs' step times name says the rank was slow, not why it is missing now
    specific = [f for f in findings if f.kind is not Kind.MISSING_RANK
                and (f.kind is not Kind.STRAGGLER or _seen_moving(f))]
    if any(f.culprit_ranks for f in findings):
        # "a rank never joined, which one the logs do not say" adds nothing beside a named culprit
        findings = [f for f in findings if f.culprit_ranks or f.kind is not Kind.MISSING_RANK]
    kept = []
    for finding in findings:
        covering = [f for f in specific if set(finding.culprit_ranks) <= set(f.culprit_ranks)]
        if finding.kind is Kind.MISSING_RANK and covering:
            _carry_ras(finding, covering[0])
        else:
            kept.append(finding)
    return kept


def _carry_ras(dropped: Finding, into: Finding) -> None:
    cited = {(item.rank, item.where) for item in into.evidence}
    ras = [item for item in dropped.evidence
           if is_ras_evidence(item) and (item.rank, item.where) not in cited]
    if not ras:
        return
    if not any(is_ras_evidence(item) for item in into.evidence):
        into.confidence = min(0.95, into.confidence + 0.05)
    into.evidence.extend(ras)


def _ras_second(findings: list[Finding]) -> list[Finding]:
    """A finding only NCCL RAS supports ranks below every finding from dumps, stacks, logs or
    /proc that names other culprits: RAS knows which processes answer and how many operations
    each launched, not which collective of which group anyone waits in."""
    grounded = [f for f in findings if not _only_ras(f)]
    for finding in findings:
        if not _only_ras(finding):
            continue
        rivals = [f.confidence for f in grounded
                  if not set(f.culprit_ranks) & set(finding.culprit_ranks)]
        if rivals:
            finding.confidence = min(finding.confidence, round(max(rivals) - 0.05, 2))
    return findings


def _only_ras(finding: Finding) -> bool:
    cited = [item for item in finding.evidence if item.source != "py-spy"]
    return bool(cited) and all(is_ras_evidence(item) for item in cited)


CONFIG_BASIS = ("a configuration that only the culprits have (a library version, an environment "
                "setting) is cited as the likely cause of their failure; differences alone name "
                "no culprit")
RULES: tuple[Weigh, ...] = (
    Weigh("cause-over-symptom", "a word-level cause (an OOM, a fault) stands beside findings "
          "that only say ranks wait for an unnamed rank, and comes first; otherwise cue findings "
          "give way to any finding read from whole records", _cues, then_order=False),
    Weigh("live-over-log-tail", "in a job the samples saw moving, a log that reads one rank as "
          "missing (it stops a step behind, or a round lacks its line) is the ragged tail of a "
          "running job's log: the rank's stacks say where it is, unless they blame it too",
          _live_over_log_tail, then_order=False),
    Weigh("moving-not-hung", "ranks sampled moving are not hung: a hang read from one moment of "
          "their stacks alone goes", _pure(_moving_not_hung), then_order=False),
    Weigh("specific-over-generic", "a missing rank adds nothing beside a finding that explains "
          "why the same ranks are missing (a stall, a death, a deadlock)", _pure(_drop_generic),
          then_order=False),
    Weigh("ras-second", "NCCL RAS knows who answers, not which collective anyone waits in: a "
          "finding only RAS supports ranks below grounded findings naming others",
          _pure(_ras_second)),
    Weigh("cite-dead-threads", "a culprit's dead threads are cited on the findings about its "
          "wait", _cite_threads, then_order=False),
    Weigh("moved-since-dump", "a rank the stacks show inside or past the collective a dump says "
          "it never joined was late, not missing", reconcile),
    Weigh("dumps-moments-apart", "a rank whose own dump shows it completing collectives up to "
          "the moment the dump was written was moving: its older frontier is the dumps' skew, "
          "not a stall", dump_skew.reconcile),
    Weigh("one-straggler", "straggler findings naming the same ranks from independent views "
          "are one finding, more certain", _pure(_one_straggler)),
    Weigh("stuck-over-slow", "a straggler the logs reported comes after a hang the stacks show "
          "now: logs tell how the job ran, stacks where it is", _pure(_stuck_over_slow),
          then_order=False),
)
_CONFIG_AT = len(RULES) - 1  # config differences are cited before stuck-over-slow
