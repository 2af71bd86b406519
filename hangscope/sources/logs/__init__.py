"""Log sources: rank stdout/stderr, torchrun launcher logs, NCCL_DEBUG output, NCCL RAS reports,
kernel logs. ``scan_log`` turns one file into :class:`~hangscope.model.LogEvent` objects; one module
per log family documents the raw formats it accepts; ``loader`` is the bundle loader for file kind
``"log"``.

Event kinds (stable; ``fields`` always may hold ``rank_source`` -- prefix | message | pid | path |
hint | content -- ``local_rank`` and ``uptime_s``):

==================================  =============================================================
kind                                fields
==================================  =============================================================
nccl_watchdog_timeout               seq, op, numel_in, numel_out, timeout_ms, ran_ms, pg,
                                    group_rank, tensor_shape, repeat
nccl_work_status                    seq, last_enqueued, last_completed, timeout, pg, group_rank
nccl_desync                         timed_out_rank, op, seq, lagging_ranks, joined_not_finished,
                                    finished_not_joined_next, never_joined
collective_fingerprint_mismatch     rank_a, rank_b, seq_a/op_a/shape_a/dtype_a, seq_b/.../dtype_b,
                                    differ
monitored_barrier_failure           failed_ranks, timeout_ms, group_rank, pg, peer_side, peer_closed
nccl_heartbeat_stuck                stuck_s, work_list_size
nccl_error                          code, error, where, nccl_version, last_error
fr_dump_notice                      action, from, last_enqueued, last_completed, dump_path
nccl_warn / nccl_transport_error    host, pid, tid, cuda_dev, src, text, transport, peer,
                                    peer_port, error, vendor_err, direction
nccl_ras                            comm, size, state, ranks, pids, nodes, procs (rank=pid@node),
                                    op_counts, majority_count, ops, behind, missing, errors, phase
gloo_timeout                        timeout_ms, op, src
gloo_connection_closed              peer, peer_port, reason, src
gloo_enforce_fail                   check, src, size_mismatch
elastic_child_failed                local_rank, pid, exitcode, signal, host, failure_time,
                                    root_cause, error_file, traceback, binary (also MPI's and
                                    srun's reports, ``mpi``: the global rank they name)
nccl_device_mismatch                around_rank, host, pid (NCCL's "Mismatched collective
                                    detected ... at and around rank N")
stall_report                        tool, op, missing, ready, seq, pg, world_size, ops, op_names,
                                    groups
stated_wait                         waiter, waited, what ("rank 4 → waiting on rank 5 (...)")
pp_actions                          actions (torch.distributed.pipelining schedule actions of a
                                    rank: ``stage:TYPE:microbatch``, comma-separated)
elastic_closing_signal              pid, signal
elastic_agent_signalled             signal (a node's torchrun agent was signalled: no rank)
traceback                           exc_type, exc_message, last_frame, last_function, frames,
                                    chained, first_exc_type
cuda_oom                            tried_bytes, capacity_bytes, free_bytes, in_use_bytes,
                                    allocated_bytes, reserved_bytes, gpu, exc_type
host_oom_kill                       pid, process, cgroup, constraint, memcg, total_vm_kb,
                                    anon_rss_kb, summary; host (``srun: error: N: task 48: Out
                                    Of Memory``, rank from the task id)
dataloader_worker_killed            pid, pids, signal, exit_code
dataloader_timeout                  timeout_s
shm_bus_error                       shm_hint
cuda_error                          error (the CUDA error text); NCCL's ``Cuda failure`` WARN
                                    also host, pid, tid, cuda_dev, src, text
gpu_xid                             xid, pci (``0000:3b:00``), pid, process, text, fatal
                                    (NVRM kernel lines; nvidia-smi's "Unable to determine the
                                    device handle" as xid 79)
gpu_fault                           vendor, gpu, reason, fatal (ROCm HSA "HW Exception by GPU")
gpu_uuid                            pci, uuid (``NVRM: GPU at PCI:...: GPU-...``)
nccl_device                         host, pid, cuda_dev, nvml_dev, pci (a rank's GPU, from its
                                    NCCL ``Init COMPLETE`` line's busId)
size_line                           template, values (``sizes``: a line naming a size, per
                                    rank stream and template)
step_skipped                        what, reason (a rank skipped a step on a non-finite loss or
                                    gradient: ``step_skips``)
stated_size                         ranks, what (NumelIn | NumelOut), numel (a person's per-rank
                                    sizes of one collective: ``stated_sizes``)
==================================  =============================================================
"""

from __future__ import annotations

from hangscope.sources.logs.common import infer_rank_from_path
from hangscope.sources.logs.scan import scan_log, sniff_log

__all__ = ["infer_rank_from_path", "scan_log", "sniff_log"]
