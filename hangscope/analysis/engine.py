"""Evidence in, verdict out: correlate, build the wait graph, run every detector, rank findings."""

from __future__ import annotations

import logging

from hangscope import __version__, timing
from hangscope.analysis import detectors, dump_skew
from hangscope.analysis.context import Context
from hangscope.analysis.correlate import GLOO_P2P_NOTE, GroupView, build_picture, finished
from hangscope.analysis.gap_lines import group_rank_gaps
from hangscope.analysis.gpu_ranks import cite_gpus, rank_gpus
from hangscope.analysis.log_health import (
    logs_benign,
    logs_finished,
    logs_moving,
    logs_report_clean,
    logs_setup_clean,
    logs_tests_clean,
)
from hangscope.analysis.log_progress import log_states, logs_advance
from hangscope.analysis.log_waits import add_log_waits
from hangscope.analysis.pg_order import stack_only_note
from hangscope.analysis.rank_state import ended_together, exited_cleanly, rank_states
from hangscope.analysis.ras_facts import ras_facts, ras_unmapped
from hangscope.analysis.snapshot_gaps import single_sample_gap
from hangscope.analysis.verdict import (
    STATUS_OF_KIND,
    Finding,
    Kind,
    RankClass,
    Status,
    Verdict,
)
from hangscope.analysis.waitgraph import build_wait_graph
from hangscope.analysis.weighing import from_stacks_alone, weigh
from hangscope.model import FrEntry, JobEvidence
from hangscope.ranges import format_ranks, ranks_phrase

log = logging.getLogger(__name__)


def build_context(evidence: JobEvidence) -> Context:
    picture = build_picture(evidence)
    stacks = rank_states(evidence)
    graph = build_wait_graph(picture, stacks, log_states(evidence))
    add_log_waits(graph, picture)
    return Context(evidence=evidence, picture=picture, graph=graph, stacks=stacks)


def analyze(evidence: JobEvidence) -> tuple[Verdict, Context]:
    with timing.phase("match"):
        ctx = build_context(evidence)
    with timing.phase("detect"):  # the cross-rank matching the detectors ask for is "match"
        return _verdict(evidence, ctx), ctx


def _verdict(evidence: JobEvidence, ctx: Context) -> Verdict:
    findings = []
    for detect in detectors.ALL:
        findings.extend(detect(ctx))
    gaps = list(evidence.gaps) + ctx.picture.notes + ras_unmapped(evidence)
    findings, differences = weigh(ctx, findings, gaps)  # competing explanations, rule by rule
    world = ctx.picture.world_size or None
    seen = sorted(evidence.ranks)
    expected = set(range(world)) if world else set(seen)
    if not any(f.culprit_ranks for f in findings) and (
            note := stack_only_note(ctx.picture, ctx.stacks)):
        gaps.append(note)  # stacks cannot tell an ordering deadlock: say so
    if (not findings or from_stacks_alone(findings[0])) and (note := single_sample_gap(ctx)):
        gaps.append(note)  # one snapshot cannot tell slow from stuck: say so, with the logs
    missing_dumps = sorted(expected - set(ctx.picture.dumps))
    if ctx.picture.dumps and missing_dumps:
        gaps.append(f"no flight-recorder dump for rank{'s' if len(missing_dumps) > 1 else ''} "
                    f"{format_ranks(missing_dumps)}")
    status = _status(ctx, findings, gaps)
    if _p2p_caveat_moot(ctx, findings):
        gaps = [g for g in gaps if g != GLOO_P2P_NOTE]
    gaps = group_rank_gaps(gaps)
    gpus = rank_gpus(ctx.evidence)
    cite_gpus(findings[0] if findings else None, gpus)
    verdict = Verdict(
        status=status,
        world_size=world,
        ranks_seen=seen,
        ranks_missing=sorted(expected - set(seen)),
        findings=findings,
        evidence_gaps=gaps,
        rank_classes=_classes(ctx, findings),
        tool_version=__version__,
        gpus={rank: gpu.describe() for rank, gpu in gpus.items()},
        config_differences=differences,
    )
    return verdict


def _why_nothing(ctx: Context) -> str:
    """The gap of a verdict with no flight-recorder dump and no stack: say what there was."""
    lagging = sorted({fact.rank for fact in ras_facts(ctx.evidence) if fact.state == "MISMATCH"})
    if lagging:
        return (f"NCCL RAS says {ranks_phrase(lagging)} launched fewer operations of a collective "
                "than the most advanced rank (MISMATCH), and that is all the evidence: in a "
                "running job a lag of a few operations is normal, so it proves no hang; attach "
                "to the job (stacks) or dump the flight recorder")
    return ("no usable evidence: no flight-recorder dump, no stack, and no log line that names "
            "a failure")


def _p2p_caveat_moot(ctx: Context, findings: list[Finding]) -> bool:
    """gloo's FR has no send/recv; that matters unless the culprits' own stacks show where they
    are, and no rank's stack is in send/recv (a rank "missing" from a collective in the dumps may
    well be blocked in a p2p op they cannot show)."""
    if not findings or not findings[0].culprit_ranks:
        return False
    if any(s.main is not None and s.main.kind == "p2p" for s in ctx.stacks.values()):
        return False
    return all((s := ctx.stacks.get(r)) is not None and s.main is not None
               for r in findings[0].culprit_ranks)


def _status(ctx: Context, findings: list[Finding], gaps: list[str]) -> Status:
    if findings:
        if _failed_mismatch(ctx, findings[0]):
            return Status.CRASHED
        if findings[0].measures.get("rule") == "one-sided-skip":
            return Status.HANG  # (an OOM caught and its batch skipped: the rank lives on, waiting)
        return STATUS_OF_KIND.get(findings[0].kind, Status.HANG)
    anyone_waits = any(ctx.picture.pending_ops(rank) for rank in ctx.picture.dumps)
    stuck_in_collective = sorted(r for r, s in ctx.stacks.items() if s.main is not None
                                 and s.main.kind in ("collective", "p2p", "init")
                                 and s.progress != "moving")
    if stuck_in_collective and not anyone_waits:
        gaps.append(f"ranks {format_ranks(stuck_in_collective)} sit in collectives that their "
                    "stacks cannot tell apart (which group, which seq): a flight-recorder dump "
                    "(TORCH_FR_BUFFER_SIZE=2000 and a dump) would")
        return Status.INCONCLUSIVE
    if ctx.stacks and all(exited_cleanly(ctx.evidence, rank) for rank in ctx.stacks):
        gaps.append("every rank exited with status 0 while it was looked at: the job finished")
        return Status.HEALTHY
    if ended_together(ctx.stacks) and not ctx.picture.dumps:
        return _ended_together(ctx, gaps)
    if ctx.stacks and not ctx.picture.dumps:
        if any(s.progress == "moving" for s in ctx.stacks.values()):
            return Status.HEALTHY
        gaps.append("no rank is blocked in torch.distributed, and the stacks show none making "
                    "progress")
        return Status.INCONCLUSIVE
    if not ctx.picture.dumps and not ctx.stacks and (note := logs_finished(ctx.evidence)
                                                      or logs_report_clean(ctx.evidence)
                                                      or logs_setup_clean(ctx.evidence)
                                                      or logs_tests_clean(ctx.evidence)
                                                      or logs_benign(ctx.evidence)):
        gaps.append(note)  # the run said it reached its end, or ran evenly, and nothing failed
        return Status.HEALTHY
    if not ctx.picture.dumps and not ctx.stacks and (note := logs_moving(ctx.evidence)):
        gaps.append(note)  # it moved to its last line and nothing failed
        return Status.HEALTHY
    if not ctx.picture.dumps and not ctx.stacks and (note := logs_advance(ctx.evidence)):
        # logs are all there is and they say it trained without a fault; a job that trained
        # and then hung (train_then_hang) reads the same, so this stays inconclusive
        gaps.append(note)
    if not ctx.picture.dumps:
        gaps.append(_why_nothing(ctx))
        return Status.INCONCLUSIVE
    if anyone_waits and (note := dump_skew.all_moving(ctx)):
        gaps.append(note)
        return Status.HEALTHY
    if anyone_waits:
        gaps.append(_waiting_gap(ctx) + ": the flight recorder cannot tell a slow collective "
                    "from a stuck transport (check NCCL logs, or attach to the live job for "
                    "stacks)")
        return Status.INCONCLUSIVE
    if "gloo" in ctx.picture.backends:
        world = ctx.picture.world_size or 0
        if len(ctx.picture.dumps) >= world and logs_advance(ctx.evidence) is not None:
            # every rank's dump idle and its logs trained on without a fault: a healthy job
            gaps.append("no collective is pending in any rank's dump and the logs show training "
                        "advancing with no error; gloo records no send/recv, so a rank blocked in "
                        "a point-to-point op would not show here")
            return Status.HEALTHY
        gaps.append("no collective is pending in any dump; gloo records no send/recv, so ranks "
                    "may be blocked in point-to-point ops or outside torch.distributed")
        return Status.INCONCLUSIVE
    return Status.HEALTHY


def _ended_together(ctx: Context, gaps: list[str]) -> Status:
    """Every rank's process went between two looks (``watch`` saw the whole job end) with no
    exit status known and no finding in the logs: healthy only where the logs say the run
    finished; logs that show training moving up to their end are what a job killed from outside
    (the OOM killer, the scheduler, a kill) leaves too, so they make no healthy verdict here."""
    if note := (logs_finished(ctx.evidence) or logs_report_clean(ctx.evidence)
                or logs_tests_clean(ctx.evidence)):
        gaps.append(note)
        return Status.HEALTHY
    moving = logs_moving(ctx.evidence)
    gaps.append(f"{ranks_phrase(sorted(ctx.stacks))} exited between the same two looks at the "
                "job, and nothing says the run finished"
                + (" (its logs show training moving up to their last lines, with no error)"
                   if moving else "")
                + ": a job killed from outside (the OOM killer, the scheduler, a kill) ends "
                "like this; look at the kernel log (dmesg: oom-kill), the scheduler's record "
                "of the job and the launcher's output for who stopped it")
    return Status.INCONCLUSIVE


def _failed_mismatch(ctx: Context, root: Finding) -> bool:
    """The root is an FR mismatch at a collective that failed (every rank retired it and went no
    further) rather than one the ranks hang in."""
    ref = root.collective
    if root.kind in (Kind.SIZE_MISMATCH, Kind.COLLECTIVE_MISMATCH) \
            and root.measures.get("outcome") == "failed":
        return True  # told by the error a rank raised (detectors/mismatch_error.py)
    if root.kind not in (Kind.SIZE_MISMATCH, Kind.COLLECTIVE_MISMATCH) or ref is None:
        return False
    group = ctx.picture.groups.get(ref.pg) if ref.pg is not None else None
    div = ctx.divergence(group) if group is not None else None
    return div is not None and div.seq == ref.seq and div.outcome == "failed"


def _waiting_gap(ctx: Context) -> str:
    """What the dumps show of the ranks that wait, where no finding explains them."""
    spots: dict[tuple[str, int, bool], tuple[GroupView, FrEntry, list[int]]] = {}
    for rank in sorted(ctx.picture.dumps):
        for group, entry in ctx.picture.pending_ops(rank):
            spots.setdefault((group.name, entry.seq, entry.is_p2p), (group, entry, []))[2] \
                .append(rank)
    parts = []
    whole = len(spots) == 1
    for group, entry, ranks in spots.values():
        done = sorted(r for r, view in group.ranks.items() if not entry.is_p2p
                      and any(finished(e) for e in view.block_at(entry.seq)))
        elsewhere = sorted(set(group.members) - set(ranks) - set(done))
        whole = whole and not done and not elsewhere and not entry.is_p2p
        text = (f"ranks {format_ranks(ranks)} wait in {entry.op} {'p2p ' if entry.is_p2p else ''}"
                f"seq {entry.seq} on pg {group.label}")
        if done:
            text += f", which ranks {format_ranks(done)} completed"
        if elsewhere:
            text += f" (ranks {format_ranks(elsewhere)} are not in it)"
        parts.append(text)
    if whole:
        return ("every rank that waits is inside the same collective with matching arguments, "
                "and no rank has completed it; nothing tells the ranks apart (FR shows every "
                "rank's entry in the same state, and no GPU readings or NCCL RAS counts single "
                "one out). Collect next: NCCL RAS (`ncclras`, NCCL >= 2.24: a rank behind in its "
                "operation counts), nvidia-smi on every node twice a few seconds apart (a GPU at "
                "0% with flat power while its peers spin is the odd rank; `hangscope attach` "
                "takes both), and py-spy dump --native of each rank")
    return "; ".join(parts[:4]) + (f"; and {len(parts) - 4} more" if len(parts) > 4 else "")


def _classes(ctx: Context, findings: list[Finding]) -> list[RankClass]:
    """Roles: the root's culprits, and the culprits of findings about as believed as the root
    (a second, independent fault), are culprits; every rank a finding names as waiting waits."""
    top = findings[0].confidence if findings else 0.0
    culprits = {r for f in findings if f is findings[0] or f.confidence >= top - 0.05
                for r in f.culprit_ranks}
    waiting = {r for f in findings for r in f.waiting_ranks} - culprits
    out = []
    for cid, ranks in sorted(ctx.graph.members.items(), key=lambda kv: kv[1][0]):
        state = ctx.graph.states[cid]
        named = [r for r in ranks if r in culprits]
        if named and len(named) < len(ranks):  # one state, but only some of it is to blame:
            out.append(RankClass(id=cid, ranks=named, state=state, role="culprit"))
            ranks = [r for r in ranks if r not in culprits]  # the others, in a row of their own
            cid = f"{cid}.others"
        role = ("culprit" if culprits & set(ranks) else "waiting" if waiting & set(ranks)
                else "unknown" if ranks[0] not in ctx.picture.dumps else "ok")
        out.append(RankClass(id=cid, ranks=ranks, state=state, role=role))
    return out
