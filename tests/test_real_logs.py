"""The real-log corpus: logs users posted in public issue threads, analyzed as a user would.

Each ``fixtures/logs/real/<stem>.log`` is the lines exactly as posted; ``<stem>.json`` names the
thread and the expected verdict (kind, and culprit ranks where the thread names them). Every file
that hangscope gets right must stay right; the ones it misses today are listed in ``KNOWN_MISSES``
with why (reported as xfail). The score is in the README.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import tempfile

import pytest

from hangscope.analysis.engine import analyze
from hangscope.options import LoadOptions
from hangscope.sources.load import load_paths

HERE = os.path.dirname(__file__)
REAL = os.path.join(HERE, "..", "fixtures", "logs", "real")
SAMPLES = os.path.join(HERE, "..", "fixtures", "logs")
CASES = sorted(os.path.basename(p)[:-4] for p in glob.glob(os.path.join(REAL, "*.log")))

# Pastes hangscope does not yet get right, and why (the README lists them too).
KNOWN_MISSES = {
    "zza_hypercomputer_internode_deepdive_lab15_straggler_rank16": "batch 54 (after its first look; no rule written for it): want missing_rank/[16] got network_fault/[16]: the late rank's own log, its peers gone when it reached the all-reduce (ncclRemoteError, 'Connection closed by remote peer'); that it slept 70 s before the collective is the lab's own marker line, and a rank that reports a peer gone reads as a lost connection. The culprit is right",
    "zz_pytorch_distributed_18_srun_ntasks_times_spawn_store_barrier": "batch 53 (after its first look; no rule written for it): want init_hang got rank_died: torch.multiprocessing.spawn's ProcessRaisedException for process 1, cut by the collector at 'line 137, in m' before the exception; the store-based barrier's timeout (world_size=2, worker_count=4) is in the thread's title, not the paste, and a spawned process that raised is a death until its exception says otherwise",
    "zl_m4_logs_tr141_04_healthy_20h_run": "batch 39 (after its first look; no rule written for it): want healthy got inconclusive: one training log line (iteration 4875 of 500000 after 19.5 h) and nothing else; that the run finished its 20 h is the logbook's word. In the corpus, logs with one progress line that did not advance and no failure are healthy 7 times and broken 6: one line cannot tell",
    "zl_m4_logs_tr141_try3_rank0_dstate_fs_freeze": "batch 39 (after its first look; no rule written for it): want missing_rank/[0] got inconclusive: an nvidia-smi snapshot alone, GPU 0 at 0% while GPUs 1-7 spin at 100%; pytorch#36285 (t_ prefix, labelled healthy) shows the same snapshot of a run its reporter calls healthy and fast. One snapshot cannot tell a rank stuck elsewhere from a moment of host-side work",
    "zl_megatron_109_rank0_builds_index_socket_timeout": "batch 39 (after its first look; no rule written for it): want missing_rank/[0] got rank_died (0.3, cue-words): Megatron's 'building the indices on rank 0 ...' and then a traceback's head, cut before its frames and its Socket Timeout; that the others timed out while rank 0 built the index for 12 hours is the reporter's word",
    "zl_nccl_fastsocket_4_healthy_warn_retries": "batch 39 (after its first look; no rule written for it): want healthy got inconclusive: Google's FastSocket plugin's WARN lines (Cannot get incoming CPU, Maximum retry reached) followed by its own 'Connected after 1000 retries'; that the job ran is the reporter's word, and one plugin's wording of a recovered retry is not read",
    "zk_alcf_nccl_tests_pytests_readme_gdr_level_phb_first_allreduce_hang": "batch 38 (after its first look; no rule written for it): want network_fault got missing_rank (0.3, no culprit): ranks 1 and 2 of 8 time out in the first ALLREDUCE and the launcher says rank 0 exited with 134 (SIGABRT, the watchdog's abort); that NCCL_NET_GDR_LEVEL=PHB with the AWS plugin stalls the transport is the write-up's finding from its test matrix, and the log shows two of eight ranks",
    "zk_tritonbench_1067_destroy_pg_warning_healthy": "batch 38 (after its first look; no rule written for it): want healthy got inconclusive: one line, 'Warning: must call destroy_process_group() before process exit', the PR author's paraphrase of torch's exit warning (no torch version prints these words); the paraphrase is no format read",
    "zj_nccl_2130_batch_p2p_unmatched_irecv": "batch 37 (after its first look; no rule written for it): want p2p_deadlock/[0] got inconclusive: three lines of rank 1's own prints up to 'before barrier'; that rank 0 blocks in an unmatched irecv is the reporter's word, and the log shows neither rank 0 nor a p2p wait",
    "zi_aws_k8s_tester_454_mpijob_bert_teardown": "batch 36 (after its first look; no rule written for it): want healthy got inconclusive: the tail of a 32-rank MPIJob, NCCL's '[Service thread] Connection closed by localRank N' and 'Abort COMPLETE' teardown lines; that the job trained as expected is the PR author's word, and teardown lines alone do not say the run finished",
    "zi_o_lora_readme_deepspeed_broadcast_seq1_p2p": "batch 36 (after its first look; no rule written for it): want network_fault got missing_rank (0.3): both ranks of a 2-GPU run time out in the first BROADCAST of pg 1; that NCCL's P2P path was broken (fixed by NCCL_P2P_DISABLE=1) is the author's finding, and the log shows only two ranks waiting at their first collective",
    "zi_pytorch_70099_ddp_unused_param_indices_rank7": "batch 36 (after its first look; no rule written for it): want collective_mismatch got inconclusive: rank 7's one line of DDP's reducer error naming parameter indices that got no gradient; the brief files unused-parameter reductions under collective_mismatch, the tool reads the reducer error as no distributed fault",
    "zi_useful_notes_and_logs_problem_log_lightning_nvml_timeout": "batch 36 (after its first look; no rule written for it): want rank_died got missing_rank/[0]: one process raises in on_train_epoch_end (an NVML symbol error) in a traceback with no rank prefix, cut by interleaved output, while rank 1 times out in ALLREDUCE; the headless traceback is not tied to rank 0",
    "zg_ascend_pytorch_doc_hccl_timeout_heartbeat_lost": "batch 34 (after its first look; no rule written for it): want rank_died/[1] got network_fault: HCCL's cluster exception report ('there are(is) 1 abnormal device(s): Cluster Exception Location[IP/ID]:[ip/1] ... ExceptionType:[Heartbeat Lost Occurred], Possible Reason:1. Process has exited, 2. Network Disconnected') is no format read; its possible reasons name the network, and that the device ID is the rank is the labeller's reading",
    "zg_bigscience_doc_megatron_fused_kernels_lock_hang": "batch 34 (after its first look; no rule written for it): want python_deadlock got inconclusive: two Megatron set-up lines ending in '> compiling and loading fused kernels ...'; that a stale build lock holds every rank there is the document's word, and a log that stops in set-up reads the same whatever holds it",
    "zg_funasr_1518_store_barrier_info_8ranks": "batch 34 (after its first look; no rule written for it): want healthy got init_hang: eight ranks add the store-based barrier's key and two of them report it completed before the excerpt ends; that the other six completed too is not in the paste",
    "zh_nccl_1189_two_node_nccltests_init_complete": "batch 35 (after its first look; no rule written for it): want healthy got network_fault (0.45, tests-no-result): nccl-tests' result header and four ranks' Init COMPLETE with no result row; the collector cut the paste there (the thread goes on with the run's connection lines), and a log that ends at the first collective reads as stuck in it",
    "ze_llamafactory_3839_npu_ej0001_stale_process_rank3": "batch 32 (after its first look): want init_hang/[3] got init_hang/[]: Ascend's EJ0001 'Failed to initialize the HCCP process' is now read as set-up failing, but the rank is on the line before it ('(PID:927000, Device:3, RankID:3) ERR02200 DIST call hccl api failed'), which no cue reads",
    "ze_oneccl_209_xccl_kvs_iface_init_hang": "batch 32 (after its first look; no rule written for it): want init_hang got inconclusive: the reporter's hand-drawn call tree (ProcessGroupXCCL::allreduce -> initXCCLComm -> ... xnet_run_progress '<-- spins forever'), not a tool's format",
    "ze_pytorch_lightning_4828_ddp_init_banners": "batch 32 (after its first look; no rule written for it): want healthy got init_hang: Lightning's 'initializing ddp: GLOBAL_RANK: N, MEMBER: k/4' banners for all four ranks and nothing after; that the job trained is the commenter's GPU table, not in the log, and a log that stops in set-up reads as stuck there",
    "ze_returnn_1454_rank0_eval_loader_pg_mismatch": "batch 32 (after its first look; no rule written for it): want collective_mismatch got rank_died: RETURNN's 'Unhandled exception' reports and a traceback with locals; that rank 0's evaluation loader set-up paired with the others' next training loader set-up is the thread's word",
    "zd_mosaicml_streaming_145_prefix_int_worker_barrier_hang": "batch 31 (after its first look; no rule written for it): want dataloader_stall got inconclusive: a Composer config banner and the reporter's own '<HANGED>' marker; that each rank drew another shared-memory prefix and the dataset's worker barrier hung is the thread's word",
    "zc_allennlp_4330_tokenizers_worker_deadlock": "batch 30 (after its first look; no rule written for it): want python_deadlock got inconclusive: AllenNLP's config and 'Beginning training' INFO lines, then a cache check, and nothing after; the tokenizers deadlock in the workers is the thread's title, the log only stops",
    "zc_ms_swift_2117_contrastive_allgather_shape": "batch 30 (after its first look; no rule written for it): want collective_mismatch got missing_rank/[0]: the user's prints of gathered logits shapes with different sequence lengths (906, 966, 902) and one rank's ALLGATHER timeout; no rule ties a user's printed tensor shapes, with no rank named, to the collective's size",
    "zc_rccl_2179_cudagraph_shared_comm_proxy_dump": "batch 30 (after its first look; no rule written for it): want pg_order_deadlock got inconclusive: a reporter's hand-written summary of RCCL proxy state (per-rank SEND/RECV base counters, rank 1 'one op ahead'); prose, no tool's format",
    "zc_semantic_segmentation_pytorch_6_eval_loader_ctrlc": "batch 30 (after its first look): want dataloader_stall got rank_died (cue): a Ctrl-C traceback cut by the excerpt at the user's 'for i, batch_data in enumerate(loader):' frame, before any DataLoader frame; it is now read as a stack sample (set-up prints beside it name no failure), but the frames it shows stop in user code",
    "zb_llamafactory_1808_barrier_reset_rank0": "batch 29 (after its first look; no rule written for it): want rank_died/[0] got init_hang/[0]: rank 3's 'Connection reset by peer' from rank 0 at a barrier while the DeepSpeed launcher kills its subprocesses; the culprit is right, but whether rank 0 died or never set up the store the paste does not say (init_hang is the accepted kind of its sibling zb_llava_930)",
    "zb_nccl_2190_shm_attach_numa_probe_skew": "batch 29 (after its first look; no rule written for it): want config_skew/[4,7] got network_fault: NCCL INFO lines where rank 3 imports host memory by CUMEM and ranks 4-6 by /dev/shm MMAP, then shm.cc errors on ranks 4 and 7; no rule compares how ranks allocate NCCL's host memory",
    "zb_piper_68_ddp_log_not_showing_healthy": "batch 29 (after its first look; no rule written for it): want healthy got inconclusive: Lightning's DDP banner and a checkpoint-restore line, cut; that TensorBoard kept updating is the reporter's word",
    "zb_sglang_20766_dp_controller_watchdog_false_alarm": "batch 29 (after its first look; no rule written for it): want healthy got python_deadlock/[0]: sglang's watchdog py-spy dump of its DP controller idle in process.join(), with the schedulers' 'Decode batch ... gen throughput' lines three seconds before; that a controller joining its children is its normal state is the PR's word",
    "zb_timechat_online_29_rank2_illegal_memory_access": "batch 29 (after its first look; no rule written for it): want rank_died/[2] got inconclusive: rank 2's traceback frames cut before the exception; the illegal memory access is in the thread's title, not the paste",
    "zb_waveglow_91_dataloader_queue_get": "batch 29 (after its first look; no rule written for it): want dataloader_stall got rank_died: a traceback through the DataLoader's queue get, cut before its exception, with no ^C or KeyboardInterrupt: read as a death's (reading such cut tracebacks as stacks took 13 corpus deaths for waits)",
    "za_nccl_2428_erdma1_unopenable_hca_skew": "batch 28 (after its first look; no rule written for it): want config_skew/[1] got network_fault/[]: two NCCL WARN lines of a re-run (one host cannot open erdma_1, 'the job may hang without an error'); the kind is accepted (network_fault is the alternative) but the cue does not carry 'Rank 1 on HOST' as the culprit",
    "za_nccl_743_megatron_bert_single_node_ok": "batch 28 (after its first look; no rule written for it): want healthy got inconclusive: Megatron set-up and one 'iteration 10/' line; one progress line shows no movement, and a log that stops at its first iteration reads the same as one stuck there",
    "za_nemo_aligner_541_ucx_linklocal_unreachable": "batch 28 (after its first look; no rule written for it): want network_fault got rank_died: UCX's 'connect(... 169.254.4.6 ...) failed: Connection refused' and 'Destination is unreachable', then the process's segfault in UCX's error handler: no rule reads the segfault as the network error's consequence",
    "za_ray_26294_raytrain_4workers_epoch100": "batch 28 (after its first look; no rule written for it): want healthy got inconclusive: four Ray workers' 'Epoc: 100' validation lines and a notebook's 'CPU times'; no progress form reads the misspelt epoch line, and the cell's end is no finish word",
    "za_torch_ucc_53_comm_check_collective_not_posted": "batch 28 (after its first look; no rule written for it): want missing_rank/[0] got rank_died: ProcessGroupUCC's COMM_CHECK report ('Ranks [0] are 'Collective wasn't posted'', ranks 1-15 at comm #12, rank 0 at #11) under 'terminate called': torch_ucc's health check has no parser",
    "za_uccl_940_deepep_zero_token_rank_skips_notify": "batch 28 (after its first look; no rule written for it): want missing_rank got rank_died: two lines, 'RuntimeError: DeepEP error: timeout (dispatch CPU)' and 'rank=0, thread=0, value=0'; that a peer skipped the notify is the PR's word",
    "za_verl_224_rollout_host_ram_96g": "batch 28 (after its first look; no rule written for it): want rank_oom got inconclusive: only Ray's memory monitor's table of the top memory users (PID, MEM(GB), COMMAND), without the monitor's sentence above it that says it killed a worker",
    "z_insightface_2013_two_nodes_different_master_addr": "batch 27 (after its first look; no "
        "rule written for it): want init_hang got inconclusive: the log is the launcher's "
        "banner only; the cause is in the two launch commands the user pasted under it, whose "
        "--master_addr differ, and commands are not read as evidence",
    "y_nccl_851_unknown_command_after_training_end": "batch 26 (after its first look; no rule written for it): want healthy got inconclusive: a user's epoch and loss prints, an 'end:' line, then NCCL's proxy WARN 'Unknown command 66326 from localRank -1' after 'Connection closed by localRank -1' (harmless at exit); the known-benign rule reads only logs made of known warnings, not progress lines then a warning",
    "y_returnn_1490_cpu_oom_param_sync": "batch 26 (after its first look; no rule written for it): want rank_oom got straggler: four ranks' step times jump together from 0.6 to 9.6 s/step after a 'MEMORY: ... increased RSS' line; that the host ran out of CPU memory is the maintainer's word, the log shows a job slowing evenly",
    "y_sglang_6624_dp1_tp2_scheduler_exception": "batch 26 (after its first look; no rule written for it): want rank_died/[2] got rank_died/[]: '[... DP1 TP2] Scheduler hit an exception'; with DP attention sglang's TP rank is global (DP0 shows TP0, DP1 TP2), without it TP is local to each DP replica: one line's head cannot tell which, so a DP1 head names no global rank",
    "x_dcgm_122_ubergemm_gpu0_3x_slower": "batch 25 (after its first look; no rule written for it): want straggler/[0] got inconclusive: DCGM's per-GPU GEMM benchmark table (GPU 0 about 6.7 TFLOPS, GPUs 1-7 about 19.2): not a distributed job's log, and no parser reads that tool's table",
    "x_heat_1003_daso_socket_errno97_warnings": "batch 25 (after its first look; no rule written for it): want healthy got init_hang: c10d's 'server socket cannot be initialized on [::]:29500 (errno: 97)' and two client lines, the IPv6 attempts c10d makes before IPv4; the same lines, repeated, are batch 11's l_pytorch_74316 whose thread says init hung: three lines cannot tell them apart",
    "x_ms_swift_9188_rank0_safetensors_exit_barrier": "batch 25 (after its first look; no rule written for it): want missing_rank got init_hang: two lines of c10d's store client timing out (waitForInput ... timed out after 300000ms) and nothing before them; that training had finished and rank 0 was still converting checkpoints is the reporter's word",
    "x_snowfall_155_ddp_two_rank_partitions": "batch 25 (after its first look; no rule written for it): want healthy got inconclusive: k2/snowfall's set-up INFO lines on two ranks (splitting cuts into partitions, creating the model), no step: a job in set-up and a job stuck in set-up read the same",
    "w_megatron_lm_663_overlap_param_gather_loss_healthy": "batch 24 (after its first look; no rule written for it): want healthy got inconclusive: one Megatron iteration line (iteration 10/80000 with its time per iteration) and timers, no error; one progress line is no movement (it is as often the line a stuck job stopped at), so logs-advance does not read it",
    "w_pytorch_41517_dataloader_first_load_slow": "batch 24 (after its first look; no rule written for it): want healthy got inconclusive: a user's own prints ('load 0 takes 4.06 seconds', 'load 1 takes 0.73 seconds', eight times over) with no rank or step: no parser reads them as progress",
    "w_trl_1051_ppo_fsdp_pad_across_processes_garbage_size": "batch 24 (after its first look; no rule written for it): want collective_mismatch got missing_rank/[0]: 'Storage size calculation overflowed with sizes=[128, 4647976594785319098]' inside Accelerate's pad_across_processes (a garbage size from the size all-gather, which only a mismatched collective gives) and rank 3's lone _ALLGATHER_BASE timeout; no rule reads an impossible size as a mismatch",
    "v_bigscience_tr11_hang_debug_pyspy_broadcast_vs_allreduce": "batch 23 (after its first look; no rule written for it): want collective_mismatch got straggler/[0]: a py-spy dump the author grouped by hand ('6 processes are in: ... 2 processes are in: ...', no rank numbers), two in DeepSpeed's broadcast and six in train(); that the six had moved on to an all_reduce is the author's later note",
    "v_ms_swift_faq_q59_rank0_dataloader_valueerror": "batch 23 (after its first look; no rule written for it): want rank_died/[0] got dataloader_stall []: a screenshot's transcription ('[rankØ]', 'File\"/path', 'fetcher. fetch index)'): the traceback's lines are too garbled to read as one; the same traceback typed cleanly reads rank_died [0]",
    "v_yolov5_7481_rank0_image_caching_timeout": "batch 23 (after its first look; no rule written for it): want missing_rank/[0] got inconclusive: rank 0's 'Caching images' bar at 85% after 29:57, then '[Rank 1] Watchdog c', the watchdog line cut after its second word by the paste",
    "u_deepspeed_5066_zero3_image_video_trace_cache": "batch 22 (after its first look; no rule written for it): want collective_mismatch got missing_rank: ZeRO-3's 'Invalidate trace cache @ step 1: expected module 15, but got module 313' (one rank's module order changed between steps) and a watchdog line cut mid-number; that ranks took different branches (image vs video batches) is the reporter's account",
    "u_pytorch_117682_coalesced_size_mismatch_repro": "batch 22 (after its first look; no rule written for it): want collective_mismatch got missing_rank/[0]: both ranks time out in the same COALESCED op at SeqNum 2 and coalesced work prints NumelIn as 2^64-1, so no size differs in the log; rank 0's line is cut mid-number and reads as rank 0 absent",
    "r_openrlhf_1097_qwen3_moe_zero3_stuck": "batch 19 (after its first look; no rule written for it): want collective_mismatch got inconclusive: Ray-prefixed frames of one forward pass, no wait and no error; the mismatch (3 ranks in all_reduce, 5 in reduce_scatter) is a linked thread's py-spy, not this paste's",
    "r_sql_r1_18_first_allreduce_timeout": "batch 19 (after its first look; no rule written for it): want init_hang got missing_rank/[0]: Ray-relayed watchdog timeouts at SeqNum=1 of a 1-element all_reduce; that the communicator's lazy creation stalled (not a rank elsewhere) is the collector's reading",
    "s_nccl_tests_82_broadcast_socket_libibverbs_warn": "batch 20 (after its first look; no rule written for it): want healthy got network_fault (tests-no-result): nccl-tests' table cut after its first row by the paste; healthy is the title's complaint that bandwidth looks too high",
    "s_pytorch_23363_docker_network_isolation": "batch 20 (after its first look; no rule written for it): want network_fault got inconclusive: one line, 'NCCL error in: ..., unhanled system error' (as posted, misspelt) inside the user's own text; Docker's network isolation is the maintainer's word",
    "t_kempnerforge_104_async_ckpt_pyspy": "batch 21 (after its first look; no rule written for it): want collective_mismatch got inconclusive: the reporter's condensed py-spy summary (prose and frame names), not py-spy's output",
    "t_mlcommons_storage_172_dlio_gdb_allreduce": "batch 21 (after its first look; no rule written for it): want collective_mismatch got inconclusive: a gdb backtrace of an MPI (mpi4py) all-reduce in DLIO; MPI frames are not read as a collective wait",
    "t_ms_swift_7992_moe_exit_teardown_watchdog": "batch 21 (after its first look; no rule written for it): want rank_died got inconclusive: an elastic table fragment and one rank's abort at teardown; groups torn down out of step is the fix PR's word",
    "t_nccl_1267_standalone_node_init_healthy": "batch 21 (after its first look; no rule written for it): want healthy got init_hang (nccl-init-started-not-completed): a one-rank communicator's Init START and its channel lines, cut by the paste before Init COMPLETE",
    "t_pytorch_36285_gpu0_zero_util_nvidia_smi": "batch 21 (after its first look; no rule written for it): want healthy got inconclusive: an nvidia-smi table with GPU 0 at 0% and the others busy; 'training is good and speed is fast' is the reporter's word",
    "p_lightning_20404_uneven_shards_hang": "batch 17 (after its first look and session 14's rules): want missing_rank/[0] got inconclusive: user prints of each rank's batch ids and a validation bar; that rank 0 left for validation while rank 1 took a third batch is the thread's reading",
    "p_nvidia_resiliency_ext_142_two_node_torchrun_init_hang": "batch 17 (after its first look and session 14's rules): want init_hang got inconclusive: NCCL set-up lines of one process on GPU 0 (the other process shows only a NET/OFI line no parser reads), so nccl-init-never-completed's one-process guard holds",
    "p_online_rlhf_22_allgather_seq1_p2p_disable": "batch 17 (after its first look and session 14's rules): want network_fault got missing_rank/[0]: one watchdog line (rank 1, ALLGATHER #1); rank0-silent's lone form names rank 0 as a prior; the broken P2P path is the reporter's fix",
    "p_torchtitan_1369_tp2_coll_healthy": "batch 17 (after its first look and session 14's rules): want healthy got inconclusive: NCCL COLL lines of two ranks where the paste ends with rank 0 two count-1 AllReduces ahead; healthy is the thread's word",
    "p_vllm_9738_healthy_tp16_multinode_wrapped": "batch 17 (after its first look and session 14's rules): want healthy got init_hang: the paste ends in vLLM's NCCL set-up lines ('Found nccl', 'is using nccl'), read as setup-stops; that the run worked is the thread's",
    "q_aws_k8s_tester_503_p5_nccl_tests_reference": "batch 18 (after its first look; no rule written for it): want healthy got network_fault: a reference nccl-tests run cut by the excerpt after some rows reads as tests-no-result (a run that stopped)",
    "q_composer_3342_straggler_detector_min_max_throughput": "batch 18 (after its first look; no rule written for it): want healthy got inconclusive: two lines of composer's straggler metrics (min/max throughput); no rule reads composer's wording",
    "q_deepspeed_4571_zero_offload_cpu_mem_then_sigkill": "batch 18 (after its first look; no rule written for it): want rank_oom/[0] got rank_died/[]: DeepSpeed's host-memory line at 84.6% and 'Killing subprocess', no worker command or return code; the -9 and the lone worker are the title's",
    "q_llamafactory_5558_mpi_multinode_allreduce_timeout": "batch 18 (after its first look; no rule written for it): want network_fault got missing_rank/[0]: multi-node watchdog timeouts under an mpi launcher head; the network cause is the thread's",
    "q_llamafactory_956_worker1_tokenizer_lags_node0_training": "batch 18 (after its first look; no rule written for it): want missing_rank got rank_died: a worker still tokenizing while node 0 trains; its traceback reads as a death",
    "q_ms_swift_6498_decord_video_read_hang": "batch 18 (after its first look; no rule written for it): want dataloader_stall got inconclusive: a py-spy dump stuck in decord's video read inside a dataset; no rule knows decord's frames as data loading",
    "q_nanogpt_55_multinode_ib_abort": "batch 18 (after its first look; no rule written for it): want network_fault got missing_rank: torch's three-line generic abort after a timeout; the InfiniBand cause is the fix that worked",
    "q_nccl_tests_219_ifname_differs_across_nodes": "batch 18 (after its first look; no rule written for it): want config_skew/[2, 3] got rank_died: nccl-tests' failure on one host whose interface name differs; read as a death, the differing NCCL_SOCKET_IFNAME is the collector's reading",
    "q_pplx_garden_10_p2p_alltoall_8rank_init_healthy": "batch 18 (after its first look; no rule written for it): want healthy got inconclusive: gloo set-up lines of 8 ranks and no step; healthy is the PR's word",
    "q_pytorch_39570_dataloader_shutdown_workers_join_hang": "batch 18 (after its first look; no rule written for it): want dataloader_stall got inconclusive: a single process's traceback in DataLoader _shutdown_workers -> w.join(); the frames are not read as a stall",
    "q_pytorch_7896_thd_initfile_rendezvous_gdb": "batch 18 (after its first look; no rule written for it): want init_hang got inconclusive: a gdb backtrace of torch 0.4's file rendezvous; gdb frames of THD are not read",
    "q_transformers_17478_earlystop_rank6_barrier": "batch 18 (after its first look; no rule written for it): want collective_mismatch/[6] got inconclusive: rank 6's two prints (early stopping, then entering a barrier); the others being in training collectives is the thread's",
    "o_accelerate_2246_slurm_duplicate_gpu": "batch 16 (after its first look and session 13's rules): want init_hang/[4, 5, 6, 7] got config_skew/[]: the kind is accepted (config_skew is the alternative), the culprits not: NCCL's 'Duplicate GPU detected' names rank pairs, and which four ranks were placed wrong is the thread's reading of its SLURM layout",
    "o_deepspeed_716_healthy_launcher_reference": "batch 16 (after its first look and session 13's rules): want healthy got inconclusive: one rank's DeepSpeed launcher and config lines, cut before any step; no progress line shows the job move",
    "o_nccl_257_iommu_p2p_allreduce_hang": "batch 16 (after its first look and session 13's rules): want network_fault got healthy: nccl-tests' header and NCCL's set-up lines, cut by the collector before the hang; set-up alone reads as a clean set-up (nccl-setup-clean); the IOMMU cause is the reporter's later finding",
    "o_sglang_13227_kimi_k2_detail_seq_mismatch": "batch 16 (after its first look and session 13's rules): want collective_mismatch/[0] got collective_mismatch/[7]: DETAIL's two fingerprints, rank 7 at BROADCAST 18 and rank 0 at 30; rule behind-in-sequence names the rank behind, the thread the rank that issued extra broadcasts ([0, 7] is accepted)",
    "o_torchspec_126_skipped_microbatch_allgather_behind": "batch 16 (after its first look and session 13's rules): want missing_rank/[1] got missing_rank/[]: the reporter's hand-edited summary ('[Rank N] Watchdog...', 'exactly one rank one collective behind: [Rank 1] Last enqueued NCCL work: 21936'); no rule reads a lone last-enqueued line against prose",
    "o_traceml_252_injected_backward_straggler_rank1": "batch 16 (after its first look and session 13's rules): want straggler/[1] got inconclusive: a markdown table of per-rank backward times, all equal (292-293 ms) by the thread's own point; only the row label '(injected +200 ms)' names rank 1",
    "o_vall_e_86_uneven_dataloader_end_validation": "batch 16 (after its first look and session 13's rules): want collective_mismatch got inconclusive: ranks 4-7 log 'Reaches end of dataloader' and 'Computing validation loss' (the k2 logger's '(5/8)' now names them); ranks 0-3 are absent from the excerpt, and no rule reads a phase only some ranks of a stated world entered",
    "o_vllm_17098_triton_ima_watchdog_rank0": "batch 16 (after its first look and session 13's rules): want rank_died/[0] got rank_died/[]: the Triton illegal-memory-access traceback carries vLLM's 'ERROR ... worker_base.py' head, no rank; rank 0 is named only in the watchdog line's PG tag, which is not tied to that traceback",
    "o_wenet_812_gloo_init_hang_64_ranks": "batch 16 (after its first look and session 13's rules): want init_hang got inconclusive: every process's last line is wenet's own 'training on multiple gpus, this gpu N' (printed before init_process_group); no rule knows that wording as set-up",
    "n_pytorch_117486_alltoall_split_sizes_mismatch": "batch 15 (after its first look and session 12's rules): want collective_mismatch got missing_rank: rank 0's watchdog on ALLTOALL_BASE while rank 1 printed its output; that the split sizes disagree is only in the thread's diagnosis",
    "l_aim_2540_dataloader_worker_aborted_remote_repo": "batch 12 (joined in session 12 after its first look and session 11's rules): want dataloader_stall/[0] got hang:dataloader_stall/[]",
    "l_facebookresearch_fairseq_1088_all_gather_list_out_of_sync": "batch 12 (joined in session 12 after its first look and session 11's rules): want collective_mismatch/[] got crashed:rank_oom/[]",
    "l_horovod_675_periodic_slowdown_rank1_data": "batch 12 (joined in session 12 after its first look and session 11's rules): want straggler/[1] got inconclusive:None/None",
    "l_horovod_824_benchmark_sudden_slowdown": "batch 12 (joined in session 12 after its first look and session 11's rules): want straggler/[] got healthy:None/None",
    "l_pytorch_9696_init_process_group_strace": "batch 12 (joined in session 12 after its first look and session 11's rules): want init_hang/[] got inconclusive:None/None",
    "l_ray_47461_train_worker0_oom_looking": "batch 12 (joined in session 12 after its first look and session 11's rules): want rank_oom/[0] got crashed:rank_died/[]",
    "l_verl_3987_fully_async_worker1_killed": "batch 12 (joined in session 12 after its first look and session 11's rules): want rank_oom/[1] got crashed:rank_died/[]",
    "l_vllm_1801_driver545_tp_first_allreduce_hang": "batch 12 (joined in session 12 after its first look and session 11's rules): want network_fault/[] got hang:missing_rank/[]",
    "l_vllm_9920_tp2_a6000_stall_iommu_acs": "batch 12 (joined in session 12 after its first look and session 11's rules): want network_fault/[] got inconclusive:None/None",
    "m_horovod_575_uneven_shard_one_rank_finished": "batch 14 (after its first look and session 12's general rules): want missing_rank/[] got crashed:rank_died/[]",
    "m_horovod_708_rank2_behind_third_gpu": "batch 14 (after its first look and session 12's general rules): want straggler/[2] got inconclusive:None/None",
    "m_milabench_367_rank0_dataloader_filenotfound": "batch 14 (after its first look and session 12's general rules): want rank_died/[0] got hang:dataloader_stall/[]",
    "m_nccl_1176_srun_bootstrap_message_truncated": "batch 14 (after its first look and session 12's general rules): want init_hang/[] got hang:network_fault/[1]",
    "m_xla_7974_xmp_assert_vs_rendezvous_hang": "batch 14 (after its first look and session 12's general rules): want rank_died/[0] got inconclusive:None/None",
    "k_fairseq_869_oom_skip_batch": "batch 13 (after its first look, no rule written for it): want rank_oom/[0] got rank_oom/[]: fairseq's 'ran out of memory' warning names GPU 0, not a rank (one process per GPU is the thread's word)",
    "k_horovod_642_rank0_exit_hang": "batch 13 (after its first look, no rule written for it): want rank_died/[0] got rank_died/[]: mpirun's 'aborted' line names no rank; rank 0 left early by the thread's account",
    "k_pytorch_101463_cleanup_loop_stuck": "batch 13 (after its first look, no rule written for it): want rank_died got inconclusive: a gdb dump of a process spinning in its exit-time clean-up; no rule reads a teardown loop",
    "k_pytorch_109074_triton_gil_deadlock": "batch 13 (after its first look, no rule written for it): want python_deadlock got inconclusive: a py-spy dump where a Triton compile holds the GIL; no thread is in a lock frame a rule reads",
    "k_pytorch_pr109611_pp_recv_timeout": "batch 13 (after its first look, no rule written for it): want p2p_deadlock got inconclusive: a pipeline recv timeout whose wrapped lines no p2p rule reads",
    "k_returnn_1621_eval_rank0_socket_timeout": "batch 13: kind right since rule store-wait (missing_rank: the store timed out after rank 0's evaluation began), culprit not: the evaluating lines carry no rank, so rank 0 is not named",
    "k_veomni_pr492_healthy_per_rank_save_timing": "batch 13 (after its first look, no rule written for it): want healthy got inconclusive: every rank's 'Shard write took N s' within a narrow spread; per-rank timings of one operation are not compared",
    "d_dlrm_292_rank7_stuck_alltoall": "right only while the file is named with its culprit ('..._rank7_...'), which was read as the rank of the whole log; pasted as log.txt the lines alone do not name rank 7",
    "h_llm_foundry_203_p2p_allgather_hang_composer": "batch 9 (after its first look, no rule written for it): want network_fault/[] got hang:missing_rank/[]",
    "i_horovod_1737_rank1_late_first_step_straggler": "batch 10 (after its first look, no rule written for it): want straggler/[1] got hang:missing_rank/[1]",
    "i_kubeflow_trainer_1601_dist_mnist_silent_nccl_init": "batch 10 (after its first look, no rule written for it): want init_hang/[] got inconclusive:None/None",
    "i_llamafactory_6111_ib_not_found_socket_slow": "batch 10 (after its first look, no rule written for it): want network_fault/[] got inconclusive:None/None",
    "i_llamafactory_8836_host_oom_loading": "batch 10 (after its first look, no rule written for it): want rank_oom/[] got inconclusive:None/None",
    "i_nccl_899_reverse_order_allreduce_multi_comm": "batch 10 (after its first look, no rule written for it): want pg_order_deadlock/[] got inconclusive:None/None",
    "j_nvidia_nccl_tests_106_slow_node_644_busbw": "batch 11 (after its first look, no rule written for it): want straggler/[] got inconclusive:None/None",
    "j_particleflow_390_rank0_only_eval_timeout": "batch 11 (after its first look, no rule written for it): want missing_rank/[] got inconclusive:None/None",
    "j_prime_rl_3186_fsdp_ulysses_order_deadlock": "batch 11 (after its first look, no rule written for it): want pg_order_deadlock/[] got hang:init_hang/[]",
    "j_pytorch_pytorch_24927_pin_memory_thread_queue_get": "batch 11 (after its first look, no rule written for it): want dataloader_stall/[] got inconclusive:None/None",
    "j_pytorch_pytorch_97066_rank0_double_numel_allreduce": "batch 11 (after its first look, no rule written for it): want collective_mismatch/[0] got hang:missing_rank/[]",
    "j_rich_2046_dataloader_worker_fork_lock_deadlock": "batch 11 (after its first look, no rule written for it): want python_deadlock/[] got inconclusive:None/None",
    "j_sglang_3467_two_nodes_stuck_init_diff_addr": "batch 11 (after its first look, no rule written for it): want init_hang/[] got inconclusive:None/None",
    "j_sglang_5457_other_ranks_still_loading": "batch 11 (after its first look, no rule written for it): want missing_rank/[] got inconclusive:None/None",
    "j_vllm_5484_pp2_gpus_cannot_talk": "batch 11 (after its first look, no rule written for it): want network_fault/[] got crashed:rank_died/[]",
    "f_aws_ofi_rccl_16_libfabric_incompat_hang": "a [rank14]: traceback cut inside DDP's first collective (_verify_param_shape_across_processes) before its exception: one rank's wait, no word of the network; that the libfabric plugin is incompatible is the thread's finding",
    "f_determined_8915_bad_gpu_pair_allgather_timeout": "gives missing_rank []: ranks 1 and 4 time out in ALLGATHER SeqNum=1 and rank 2's traceback ends in wrap_model, the same lines as a rank that never arrived (a_deepep_411 is labelled missing_rank on them); that two GPUs cannot talk over P2P is the thread's finding",
    "f_fastmoe_47_slow_startup_not_hang": "Megatron start-up lines ending at '[before the start of training step]', no error: a slow start-up and a hang at the first step read the same; that it was only slow is the reporter's later word",
    "f_megatron_bridge_1477_validation_no_samples_ibv_warn": "only 'Call to ibv_get_async_event failed' WARNs (NCCL's async-event reader, an echo: now read as no fault, inconclusive); that ranks without validation data never reached the collectives is the thread's word, no line shows it",
    "f_ray_52641_torch_dataloader_deadlock_timeout": "three frames of a Ray worker's traceback (train_fn_per_worker, run, train_epoch) cut before any DataLoader frame: only the working directory's name says 'torch_dataloader'",
    "g_axolotl_3443_rank0_loading_weights_store_get_timeout": "batch 7 (after its first look): the ncclUniqueId wait naming rank 0 is hard-wrapped inside a word ('via c1' / '0d key-value store') and not rebuilt; the cue tier reads init_hang with no culprit",
    "g_nccl_1766_recv_thread_vs_allreduce_thread_launch_queue_deadlock": "batch 7 (after its first look): one process's gdb threads, one in a recv and one in an all_reduce launch, both in NCCL's launch queue; no rule reads an ordering deadlock between two threads of one rank from native frames",
    "g_pytorch_76198_monitoredbarrier_rank1_blames_rank0_elastic_no_restart": "batch 7 (after its first look): the thread says rank 0 went away; the log only has rank 1's 'received errors ... from rank 0' of a monitored barrier, read as rank 0 missing (culprit right, kind missing_rank)",
    "b_pytorch_78514_gloo_closed_by_peer": "the one error line names the peer as an IP:port "
                                           "(18.25.6.30:30872), not a rank; rank 0 appears only "
                                           "as a literal argument in the user's source line "
                                           "'dist.recv(input,0)', and the traceback's header and "
                                           "the printing rank were trimmed off",
    # blind batches 4 and 5 (fixtures/logs/blind), after the rules written for them
    "d_colossalai_3383_gemini_pp_isend_deadlock": "p2p_deadlock from the user's own c10d debug prints (repeated isend vs one irecv): no parser pairs per-rank send/recv prints yet",
    "d_horovod_1407_rank3_25_batches_vs_26": "each rank prints its batches per epoch (26, 26, 26, 25) and Horovod's 'has been shut down' error follows; no rule yet reads uneven per-rank step counts as the missing rank",
    "d_pytorch_76287_elastic_keepalive_failing_node": "only elastic's keep-alive warnings for one node: read as a rendezvous (init) problem; that the node crashed is the thread's word",
    "d_pytorch_lightning_14986_bootstrap_duplicate_rank": "NCCL bootstrap's WARN 'rank 1 of 8 ranks has already checked in' is read as a generic WARN: no rule reads it as a duplicate rank",
    "d_returnn_1485_slow_epochs_all_ranks": "slow epochs on every rank (a straggler of the whole job): per-step times are read per rank stream, and this log has no rank streams",
    "d_torchdata_659_rank0_late_shared_seed_socket_timeout": "'Socket Timeout' while creating the DataLoader iterator (shared seed from rank 0): no rule ties a DataLoader-init store timeout to rank 0",
    "d_torchtitan_1618_validation_uneven_batches": "the users' per-rank prints of validation batch counts differ; no rule reads uneven loop lengths as a mismatch",
    "e_elastic_134_worker_killed_nccl_conn_closed": "the surviving worker's 'Connection closed by remote peer' is all there is: read as a network fault; that a worker was killed is the thread's word",
    "e_ms_swift_10183_broadcast_numel_mismatch": "two ranks at one SeqNum with other numels and no majority: the tie-break names rank 3, the thread names rank 2 (rank 0 had moved on, so neither side is clearly odd)",
    "e_nccl_1610_two_thread_alltoall_same_comm": "two threads sharing one communicator: watchdog timeouts on two groups; no rule yet for concurrent use of one comm",
    "e_nccl_1634_net_plugin_on_some_nodes": "config_skew: the NCCL INFO lines show the net plugin (libnccl-net.so) loaded on some nodes only; no rule compares NCCL's INFO lines across nodes yet",
    "e_pytorch_130102_new_group_different_ranks": "only the users' prints ('0 before barrier: [0, 3]', '1 before barrier: [1, 2]'): no error, no timeout; no rule reads group membership from prints",
    "e_rccl_429_allgather_allreduce_rank2": "the RCCL COLL lines that show rank 2 in AllGather are summarised in the thread, not in the pasted log (stacks of 0,1,3 only)",
    "e_xtuner_1790_data_bound_slow_ranks": "a training-log analyzer's table of per-rank data-loading times: not parsed",
    "zn_bigscience_tr11_prequel_pyspy_hang": "batch 41 (after its first look; no rule written for it): want collective_mismatch got straggler/[0]: the logbook's hand-grouped py-spy summary ('6 processes are in:' train at training.py:915, '2 processes are in:' DeepSpeed's broadcast), the same paste as v_bigscience_tr11_hang_debug_pyspy_broadcast; the six sit at a line (an all_reduce's result read back) that a Python stack shows as running code, so they read busy",
    "zn_bigscience_tr11_readme_first_epoch_healthy": "batch 41 (after its first look; no rule written for it): want healthy got inconclusive: one Megatron iteration line, hard-wrapped; one progress line is no movement (healthy 7 times and broken 6 in the corpus)",
    "zo_alcf_nccl_tests_resnet50_with_aws_broadcast_timeout": "batch 42 (after its first look; no rule written for it): want network_fault got missing_rank/[1] (absent-from-round): ranks 0,2,3 time out in DDP's first broadcast and rank 1 prints no watchdog line (it is killed, signal 15); that an aws-ofi-nccl setting broke every multi-node run is the repository README's word, not the log's",
    "zo_gnosia93_training_on_eks_a2_p4d_4proc_benign_ofi_warn_healthy": "batch 42 (after its first look and its rules: warn-then-ready, a reconciled setting's mismatch, a climb to a small share of the host): want healthy got inconclusive: the log ends at '***** Running training *****' and a tqdm bar at 0%; that the run finished in 16 minutes is the page's word",
    "zo_jotschi_lavis_experiments_notes_rank0_batchsize_skew_allgather_mismatch": "batch 42 (after its first look; no rule written for it): want collective_mismatch/[0] got collective_mismatch/[] (timed-out-past-peer, kind right): two ranks 121 collectives apart, equal sides; that rank 0 ran a larger batch is the commit's word",
    "zo_nccl_2353_proxy_pool_localopappend_hang": "batch 42 (after its first look; no rule written for it): want missing_rank/[1] got inconclusive: the issue's prose describes an eu-stack capture (rank 1's main thread inside ncclEnqueueCheck) between NCCL INFO channel lines; no stack is pasted in a format read here",
    "zo_prime_diloco_68_gloo_preamble_size_mismatch": "batch 42 (after its first look; no rule written for it): want collective_mismatch got inconclusive: gloo's 'op.preamble.length <= op.nbytes' enforce (a peer sent more bytes than this rank posted) is in a fenced block before a second block of step lines, which read as training that went on past it",
    "zp_ms_swift_2776_nccl_shm_segment_fail": "batch 43 (after its first look; no rule written for it): want init_hang got network_fault (cue-words): NCCL's 'Error while creating shared memory segment /dev/shm/...' and its return-code trail ('transport.cc:33 -> 2'); the corpus labels this line three ways (rank_died/rank_oom, network_fault/other, init_hang/other), and no rule is written for a label the collectors do not agree on",
    "zq_horovod_pr26_nccl_init_race_gdb": "batch 44 (after its first look; no rule written for it): want init_hang got inconclusive: a gdb paste of two threads, one in ncclAllReduce's pthread_cond_wait and one in libcuda's sem_wait; the label rests on the maintainer's account (communicators created and used at once, NCCL's first collective waiting on its connection set-up), which the stacks alone do not tell from a collective waiting on a peer",
    "zq_sglang_33549_dspark_rank_divergence_watchdog": "batch 44 (after its first look; no rule written for it): want collective_mismatch got inconclusive: two TP ranks' scheduler dumps whose KV-pool counters differ (available=1024 vs 2048), cut mid-line; that ranks sampling apart made their batches and shapes differ is the contributor's diagnosis, not anything the ten lines say",
    "zr_straggle_ml_experiments_resnet_rank1_injected_straggler": "batch 45 (after its first look; no rule written for it): want straggler [1] got healthy: one rank's own log of a job whose slowness a straggler simulator injects ('DDPStraggleSim ... active for rank 1', straggle_events=~770 per epoch, step_time max 3.5 s against min 0.15 s) while every epoch completes; reading a simulator's self-report, or one log's min/max step times, as a slow rank is fitting to this repository",
    "zr_training_on_eks_p4d_1pod_4proc_nccl_info_healthy": "batch 45 (after its first look; no rule written for it): want healthy got inconclusive: a 4-rank NCCL_DEBUG=INFO paste whose communicators all came up, then one training record (step 5) and the paste ends: a run cut there reads the same as one that hangs after it",
    "zs_detectron2_3886_rank0_eval_stall_after_inference": "batch 46 (after its first look; no rule written for it): want straggler got inconclusive: four lines of detectron2's evaluator, the last its 'Total inference pure compute time'; that rank 0 then spent two hours in the COCO evaluation while the other rank waited is the reporter's word, and a log that stops after a phase's last line reads the same whether the job is slow or stuck",
    "zt_colossalai_3737_dual_card_stuck_after_set_device": "batch 47 (after its first look; no rule written for it): want init_hang got inconclusive: two ranks' ColossalAI 'process rank N is bound to device N' lines (a rich console, hard-wrapped) and nothing after; no set-up wording of ColossalAI's is read, and that the job then hung is the reporter's word",
    "zt_nccl_957_mpirun_cuda_invalid_argument_connect": "batch 47 (after its first look; no rule written for it): want network_fault got rank_died/[0, 3]: two local ranks' NCCL WARN \"Cuda failure 'invalid argument'\" in transport.cc during the proxy's Connect, read as their GPUs failing; the label (a container's NCCL 2.18.3 failing on some nodes) is the collector's approximation, other and config_skew named as alternatives",
    "zu_pytorch_105695_nccl_init_options_spam": "batch 48 (after its first look; no rule written for it): want healthy got inconclusive: two ranks' 'ProcessGroupNCCL initialized with following options' banners and nothing after; that such jobs run fine is the PR author's word, and a log that ends in its set-up banner reads the same as one stuck after it",
    "zv_straggle_ml_experiments_bert_finetune_straggle_rank1": "batch 49 (after its first look; no rule written for it): want straggler [1] got healthy: rank 0's own log of a run whose straggler simulator slows rank 1 ('straggle_ranks: [1]', '[straggle_sim] rank 0 not in target ranks {1}, skipping'); rank 0's steps are slower than in the repository's unslowed runs, which this log does not hold: as with batch 45's case from the same repository, reading a simulator's configuration as a slow rank would be fitting to it",
    "zv_straggle_ml_experiments_densenet121_straggle_rank1": "batch 49 (after its first look; no rule written for it): want straggler [1] got healthy: as the BERT run of the same repository, rank 0's epochs (about 1090 s against 1022 s unslowed, in logs this one does not hold) with straggle_events=none",
    "zo_verl_agent2_dp_actor_v1_sft_branch_mismatch": "batch 42 (after its first look; no rule written for it): want collective_mismatch got missing_rank/[1]: two ranks' watchdogs at ALLREDUCE #2635 and _REDUCE_SCATTER_BASE #2667 of the default group; a rank behind in a named group reads missing (0.75) over the diverged sequences (0.65), and a corpus case with the same shape four seqs apart is a missing rank",
}


def _verdict(path: str):  # type: ignore[no-untyped-def]
    """The verdict on the log read as a user's paste is: under a neutral name, since a corpus
    file's descriptive name ("..._rank0_absent.log") would be taken for the rank whose log it is."""
    with tempfile.TemporaryDirectory() as tmp:
        paste = os.path.join(tmp, "log.txt")
        shutil.copyfile(path, paste)
        evidence, _ = load_paths([paste], LoadOptions())
        verdict, _ = analyze(evidence)
    return verdict


def _family(kind: str) -> str:
    return "collective_mismatch" if kind == "size_mismatch" else kind


def _expected(stem: str) -> dict[str, object]:
    with open(os.path.join(REAL, stem + ".json"), encoding="utf-8") as handle:
        meta = json.load(handle)
    assert meta["source"].startswith("https://"), f"{stem}: source must be the thread"
    return meta["expected"]  # type: ignore[no-any-return]


def test_corpus_is_big_enough() -> None:
    assert len(CASES) >= 40
    sources = {json.load(open(os.path.join(REAL, s + ".json")))["source"] for s in CASES}
    assert len(sources) == len(CASES), "each log must come from a thread of its own"


@pytest.mark.parametrize("stem", CASES)
def test_real_log_verdict(stem: str) -> None:
    if stem not in KNOWN_MISSES:
        _check(stem)
        return
    try:
        _check(stem)
    except AssertionError:
        pytest.xfail(KNOWN_MISSES[stem])
    pytest.fail(f"{stem} is right now: take it out of KNOWN_MISSES")


def _check(stem: str) -> None:
    expected = _expected(stem)
    verdict = _verdict(os.path.join(REAL, stem + ".log"))
    if expected.get("status") == "healthy":
        assert verdict.status.value == "healthy", (verdict.status, verdict.evidence_gaps[-1:])
        return
    assert verdict.root is not None, f"{stem}: no finding ({verdict.evidence_gaps[-1:]})"
    # The labeller of a blind batch may accept a second reading (``also_acceptable``: kinds, culprit
    # lists); size_mismatch is scored as collective_mismatch, as score-cases scores it.
    extra = expected.get("also_acceptable") or {}
    kinds = {_family(str(expected["kind"]))} | {_family(k) for k in extra.get("category", [])}  # type: ignore[union-attr]
    assert _family(verdict.root.kind.value) in kinds, verdict.root.summary
    if expected.get("culprit_ranks") and stem not in CULPRIT_MISSES:
        options = [sorted(expected["culprit_ranks"])]  # type: ignore[arg-type]
        options += [sorted(c) for c in extra.get("culprit_ranks", [])]  # type: ignore[union-attr]
        assert sorted(verdict.root.culprit_ranks) in options, verdict.root.summary
    # every finding cites where it read its evidence
    assert all(item.where for item in verdict.root.evidence), verdict.root.evidence


# Right kind, culprit not the one the thread names.
CULPRIT_MISSES: dict[str, str] = {}


def test_known_misses_exist() -> None:
    assert set(KNOWN_MISSES) <= set(CASES)


SIGNALS = ("Watchdog caught", "Timeout at", "Detected mismatch", "monitoredBarrier",
           "didn't join", "never joined", "store based barrier", "timed out")


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(SAMPLES, "*.log"))))
def test_no_sample_log_is_without_a_verdict(path: str) -> None:
    """A log that shows a timeout, a mismatch, a desync or a failed barrier never gets 'no usable
    evidence': at worst a finding with an unknown culprit and the next step."""
    with open(path, encoding="utf-8", errors="replace") as handle:
        text = handle.read()
    verdict = _verdict(path)
    if any(signal in text for signal in SIGNALS):
        assert verdict.findings, f"{path}: {verdict.evidence_gaps}"
    assert not any("no usable evidence" in gap for gap in verdict.evidence_gaps)


def test_confident_first_findings_are_right() -> None:
    """Issue 18: a first finding at confidence >= 0.8 is right (kind and culprit, as the thread
    says) at least 90% of the time on the corpus, known misses included."""
    confident: list[str] = []
    wrong: list[str] = []
    for stem in CASES:
        root = _verdict(os.path.join(REAL, stem + ".log")).root
        if root is None or root.confidence < 0.8:
            continue
        confident.append(stem)
        try:
            _check(stem)
        except AssertionError:
            wrong.append(stem)
    assert len(confident) >= 20, confident
    assert len(wrong) <= 0.1 * len(confident), (len(confident), wrong)
