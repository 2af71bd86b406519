"""missing_rank from stacks alone: every rank seen has its host thread waiting for its GPU.

Rule ``all-wait-on-gpu``: no rank is blocked in torch.distributed, and the main thread of every
rank whose stack is known waits for its GPU (``cudaStreamSynchronize``, ``cuEventSynchronize``,
``.item()``'s ``_local_scalar_dense``, ``torch.cuda.synchronize``: ``stacks.is_cuda_sync``), none
moving, none gone, and no log reports a failure. NCCL runs a collective as a kernel on the
rank's stream and the host goes on, so a host that waits this long on its stream most often waits
on a collective kernel that waits for a peer: a rank that never joined, or died where no log
shows it (the others' stacks look the same; a gdb or ``py-spy dump --native`` of one process is
the usual paste). A GPU hung in its own kernel reads the same, hence the low confidence. Culprit:
the ranks of the stated world size with no stack, where that is known; else none. Cites: the
stacks. The finding says what would tell (every rank's stack, a flight-recorder dump, the GPUs'
utilization).
"""

from __future__ import annotations

from hangscope.analysis.context import Context
from hangscope.analysis.log_causes import failures
from hangscope.analysis.verdict import Finding, Kind
from hangscope.ranges import ranks_do, ranks_phrase

RULE = "all-wait-on-gpu"
CONFIDENCE = 0.3
_DISTRIBUTED = frozenset({"collective", "p2p", "init"})


def detect(ctx: Context) -> list[Finding]:
    states = ctx.stacks
    if not states or failures(ctx.evidence):
        return []
    if any(state.gone or state.main_finished or state.progress == "moving"
           for state in states.values()):
        return []
    if any(thread.kind in _DISTRIBUTED for state in states.values() for thread in state.threads):
        return []
    if not all(state.main is not None and state.main.kind == "cuda_sync"
               for state in states.values()):
        return []
    seen = sorted(states)
    world = ctx.evidence.stated_world_size() or 0
    absent = [r for r in range(world) if r not in states] if world > len(seen) else []
    call = next(iter(states.values())).main
    op = call.op if call is not None and call.op else "a CUDA synchronize"
    who = (f"{ranks_phrase(absent)}, of the {world} ranks stated, left no stack: the likeliest "
           "to be elsewhere" if absent else
           "which rank is elsewhere these stacks cannot say (a stack of every rank would: the "
           "one not waiting on its GPU)")
    summary = (f"rule `{RULE}`: {ranks_do(seen, 'wait')} for the GPU in {op} and no rank is "
               "blocked in torch.distributed: NCCL runs collectives as kernels on the stream the "
               "host then synchronizes, so the work waited on is most often a collective whose "
               f"peer never joined it or died; {who}. A GPU hung in its own kernel reads the "
               "same: a flight-recorder dump (TORCH_FR_BUFFER_SIZE) or the GPUs' "
               "utilization (100% on an NCCL kernel) tells them apart")
    evidence = [item for rank in seen[:4]
                if (item := ctx.stack_evidence(rank, "main thread: ")) is not None]
    return [Finding(kind=Kind.MISSING_RANK, culprit_ranks=absent, waiting_ranks=seen,
                    confidence=CONFIDENCE, summary=summary, evidence=evidence,
                    measures={"rule": RULE})]
