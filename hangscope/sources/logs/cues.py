# ruff: noqa: E501  (the patterns quote the words real software writes)
"""The last tier: words that point at a kind of failure, where no record was read in full.

A paste a person skims at 3 a.m. still says what happened in words: ``Segmentation fault``,
``transport retry counter exceeded``, ``DataLoader worker ... exited unexpectedly``, ``Timed out
initializing process group``, ``size mismatch``. The family parsers read whole records; a line they
do not know (another launcher, a wrapper's wording, a record cut by a terminal) is lost to them. This
scan reads the log's tail once and turns each line that carries such words into a ``cue`` event:
``suggests`` (a kind), ``cue`` (the name of the word class), ``role`` (``cause``: the line says
what failed on its own rank; ``echo``: it reports a peer's failure, so its own rank is no culprit;
``symptom``: a wait or a timeout, which any cause produces).

Cues are weak by construction: ``analysis/detectors/weak_cues.py`` reads them only where no
detector found anything, at low confidence, and quotes the lines. Network words count only beside
failure words (every healthy NCCL log says ``NET/IB : Using [0]mlx5_0:1/IB``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from hangscope.model import LogEvent
from hangscope.sources.logs.common import SPAWN_HEADER, make_event, parse_line
from hangscope.sources.logs.literal_gate import LiteralGate
from hangscope.sources.logs.tail import LogicalTail, logical_tail

MAX_CUES = 2048


@dataclass(frozen=True, slots=True)
class Cue:
    name: str
    suggests: str  # a Kind value
    role: str  # cause | echo | symptom
    pattern: re.Pattern[str]
    needs: re.Pattern[str] | None = None  # a second pattern the line must also match
    unless: re.Pattern[str] | None = None  # and one it must not


_FAIL = re.compile(r"(?i)\b(?:warn(?:ing)?|error|errno|fail(?:ed|ure|s)?|refused|unreachable|timed out|abort(?:ed|ing)?|"
                   r"retr(?:y|ies)|exceeded|(?:is |went |link )down|lost|reset|unable|cannot|could not|fatal|degraded)\b")
_INFO = re.compile(r"\bN?CCL INFO\b")  # NCCL reports a failure as WARN; INFO lines describe set-up
# torch aborts a rank whose collective timed out (SIGABRT on the watchdog's line): the abort is
# the timeout's consequence, read as the timeout
_AFTER_TIMEOUT = re.compile(r"(?i)Watchdog caught|timed[ -]out|timing out|Timeout at NCCL|collective operation timeout")
# NCCL INFO lines describe set-up; c10d's store client (socket.cpp's waitForInput, TCPStore) times
# out waiting for another rank to write a key: a wait (or, at connect, rendezvous), not the network
# (c10d's store socket's own words, also where an exception carries them without c10d's head:
# "The server socket has failed to bind to [::]:29500 (errno: 98 - Address already in use)")
# torch_xla's mesh service (mesh_service.cc) failing a rendezvous because a peer process's
# socket closed: "Failed to meet rendezvous 'loss_reduce': Socket closed (14)" (its maintainers: a
# process exited early, a segfault, and the others fail to meet it): the peer's death
_XLA_PEER_CLOSED = r"Failed to meet rendezvous '[^']{0,200}': Socket closed"
_NOT_NETWORK = re.compile(r"\bN?CCL INFO\b|\[c10d\]|waitForInput|\bTCPStore\b|\bPrefixStore\b|"
                          r"\b(?:server|client) socket (?:has failed to|cannot be initialized|"
                          r"has timed out)|" + _XLA_PEER_CLOSED)
_DIST = re.compile(r"(?i)all[_-]?reduce|all[_-]?gather|reduce[_-]?scatter|broadcast|barrier|all[_-]?to[_-]?all|"
                   r"collective|\bnccl|\bgloo|\brccl|\bhccl|\brank|process[_ ]group|c10d|distributed|\bddp\b|fsdp|deepspeed|megatron")

# Order matters only for the name a line is filed under: one line gives one cue, the first that
# matches. Kinds are weighed in analysis/detectors/weak_cues.py.
CUES: tuple[Cue, ...] = (
    # the scheduler ending the job itself (slurmstepd: "*** JOB 1809655 ON r6i4n3 CANCELLED AT
    # 2021-05-24T09:50:34 DUE TO TIME LIMIT ***", a preemption, a user's scancel): the deaths that
    # follow are its teardown (read by analysis/log_progress.teardown_of_stop, never a finding)
    Cue("scheduler-stop", "rank_died", "symptom", re.compile(
        r"\*\*\* (?:JOB|STEP) [\d.]+ ON \S+ CANCELLED AT \S+(?: DUE TO (?:TIME LIMIT|PREEMPTION))?"
        r"(?: \*\*\*| DUE TO (?:TIME LIMIT|PREEMPTION))")),
    Cue("out-of-memory", "rank_oom", "cause", re.compile(
        r"(?i)out of memory|OutOfMemoryError|CUDA_ERROR_OUT_OF_MEMORY|"
        # the CUDA driver API's code 2 (CUDA_ERROR_OUT_OF_MEMORY) from cuMemCreate, as
        # torch_memory_saver (sglang, verl) reports it: "CUresult error  result=2 ... cu_mem_create"
        r"CUresult error\s+result=2\b|\bOOM[- ]?kill|OOMKilled|\boom_kill|Out of memory: Kill(?:ed)? process|"
        r"memory cgroup out of memory|std::bad_alloc|Cannot allocate memory|CUBLAS_STATUS_ALLOC_FAILED|"
        # (not a metric's counter at zero: fairseq's progress lines carry "oom=0.000")
        r"\bOOM\b(?! score)(?!\s*[=:]\s*0(?:\.0*)?(?![\d.]))|exceeded (?:its |the )?memory limit|Memory limit exceeded|"
        # XLA's device allocator (TPU, torch_xla): "RESOURCE_EXHAUSTED: Attempting to reserve
        # 10.51G at the bottom of memory. That was not possible." (not gRPC's message-size kind)
        r"RESOURCE_EXHAUSTED\b.{0,40}(?:Attempting to (?:reserve|allocate)|memory)|"
        # Ray's memory monitor killing a task: "Memory on the node (...) where the task (...) was
        # running was 445.48GB / 468.75GB (0.95), which exceeds the memory usage threshold"
        r"exceeds the memory usage threshold|Ray killed this worker|"
        # NCCL's alloc.h when cudaMalloc fails (torch's "Last error:" repeats it): the GPU's
        # memory is gone, even for a few KB of NCCL's own buffers
        r"Failed to CUDA (?:host )?calloc(?: async)? \d+ bytes|"
        # NCCL's shmutils.cc when /dev/shm (host memory) is full: "Error while creating shared
        # memory segment /dev/shm/nccl-Ewjreo (size 33030528), error: No space left on device"
        r"shared memory segment.{0,160}No space left on device|"
        r"Memory on the node \(.{0,200}\) where the (?:task|worker|actor)\b"),
        # Ray's node-death warning lists what can cause it ("a raylet crashes unexpectedly (OOM,
        # preempted node, etc.)"): a node gone, not memory that ran out (cue node-dead)
        unless=re.compile(r"(?i)crashes unexpectedly \(OOM")),
    # NCCL's init.cc (ncclInvalidUsage): two ranks were given one GPU, a launch setting (device
    # index hard-coded, CUDA_VISIBLE_DEVICES, local rank) wrong on some processes
    Cue("duplicate-gpu", "config_skew", "cause", re.compile(
        r"(?i)Duplicate GPU detected|both on CUDA device|same (?:GPU|CUDA device) (?:for|by) (?:two|multiple|several) (?:ranks|processes)")),
    # gloo (ProcessGroupGloo.cpp) found no address for the host name and bound to loopback:
    # peers on other hosts cannot reach that rank, so the group's connectFullMesh never completes
    # (or its pair says so itself: "connectFullMesh failed ... (rank=8, size=16,
    # local=[127.0.0.1])", a rank whose own end of the mesh is loopback)
    Cue("gloo-loopback", "init_hang", "cause", re.compile(
        r"Unable to resolve hostname to a \(local\) address|\blocal=\[127\.\d+\.\d+\.\d+\]")),
    # gloo's own set-up failing to reach a peer: its pair.cc "connect [127.0.1.1]:25472:
    # Connection refused" (an address the host name resolved to, here Debian's loopback alias),
    # "Gloo connectFullMesh failed", or device.cc "Unable to find address for: HOST" (the name does
    # not resolve): the process group never forms (not "No route to host": fabric-fault)
    Cue("gloo-connect", "init_hang", "cause", re.compile(
        r"Unable to find address for:? \S|Gloo connectFullMesh failed|timed out connecting: SO_ERROR|"
        r"\bconnect \[[^\]\s]+\]:\d+: (?:Connection refused|Connection timed out)|"
        # the same error with its address wrapped onto the next line by a terminal
        r"gloo/transport/tcp/pair\.cc:\d+\] connect\s*$")),
    Cue("gpu-fault", "rank_died", "cause", re.compile(
        r"(?i)illegal memory access|device-side assert|unspecified launch failure|uncorrectable ECC|"
        r"GPU (?:has )?fallen off the bus|\bXid\b(?: \(PCI:[0-9a-fA-F:.]+\))?[^0-9]{0,8}(?:13|31|43|48|62|63|64|79|92|94|95|119|120)\b|"
        r"CUDA error: (?!out of memory)|cudaError\w*|ncclUnhandledCudaError|CUDA driver error|"
        # the kernel's own assert, printed by each failing GPU thread before the device-side
        # assert error: "IndexKernel.cu:92: ...: block: [0,0,0], thread: [3,0,0] Assertion
        # `idx < size` failed."
        r"\.cuh?:\d+: .{0,600}block: \[\d+, ?\d+, ?\d+\], thread: \[\d+, ?\d+, ?\d+\] Assertion|"
        # NCCL's CUDACHECK wording, and its error-return trace of code 1 (ncclUnhandledCudaError:
        # "NCCL INFO init.cc:1093 -> 1", one line per function the error passes back through)
        r"Cuda failure (?:\d+ )?'(?!out of memory)|NCCL INFO [\w./\-]+\.(?:cc|cu|h|cpp):\d+ -> 1\b")),
    # (not ibv_get_async_event: NCCL's async-event reader failing is an echo, see nccl_debug.py)
    Cue("fabric-fault", "network_fault", "cause", re.compile(
        r"(?i)\bXid\b(?: \(PCI:[0-9a-fA-F:.]+\))?[^0-9]{0,8}(?:74|144|145|146|147|148|149|150|154)\b|NVLink (?:error|fault|down|inactive)|"
        r"transport retry counter exceeded|IBV_WC_\w+(?<!SUCCESS)|\bibv_(?!get_async_event)\w+ (?:failed|error)|"
        r"Got completion (?:from peer \S+ )?with (?:status|error)\s*[=:]?\s*(?!0\b)\d+|"
        r"RDMA (?:error|failure)|port \d+ (?:is )?down|link (?:is )?down|NIC (?:error|failure|down)|"
        r"ncclSystemError|unhandled system error|fi_\w+ (?:failed|error)|libfabric.*(?:error|fail)|"
        r"No route to host|Network is unreachable|EHOSTUNREACH|ENETUNREACH|"
        # ibstat / ibstatus: an HCA port that is down
        r"^\s*State: Down\b|^\s*Physical state: (?:Disabled|Polling|LinkErrorRecovery)\b|"
        r"socket (?:connect|poll|recv|send)\w* (?:to .* )?(?:failed|error|timed out)|"
        # NCCL's error-return trace of code 2 (ncclSystemError: a system call, in practice a
        # socket's, failed): "NCCL INFO misc/socket.cc:568 -> 2", one line per function
        r"\bINFO [\w./\-]+\.(?:cc|cu|h|cpp):\d+ -> 2\b")),
    Cue("network-words", "network_fault", "cause", re.compile(
        r"(?i)\bNET/(?:IB|OFI|Socket|Plugin)\b|\bib(?:v|verbs)\b|\bmlx5|\bRoCE\b|\bEFA\b|\binfiniband\b|\bGDR\b|"
        r"gdrcopy|\bsocket\b|\bNCCL_SOCKET_IFNAME|\bNCCL_IB_\w+|\binterface\b|\bnetwork\b"), _FAIL, _NOT_NETWORK),
    # NCCL's socket transport listing a container bridge or a veth among the interfaces it uses
    # (NET/Socket : Using [1]br-05ab815fa14e:172.19.0.1<0>): traffic sent to an address the peer
    # cannot reach (NVIDIA/nccl's advice: NCCL_SOCKET_IFNAME to the real NIC)
    Cue("virtual-interface", "network_fault", "cause", re.compile(
        r"\[\d+\](?:docker\d+|br-[0-9a-f]{12}|veth[0-9a-f]{6,}|virbr\d+|cni\d+|flannel\.\d+)[:%]")),
    # NCCL's socket transport (or bootstrap) listing the loopback among other interfaces
    # ("NET/Socket : Using [0]lo:127.0.0.1<0> [1]eth0:192.168.4.230<0>"; NCCL < 2.4 prints one
    # "NET : Using interface lo:127.0.0.1<0>" line per interface): NCCL leaves lo out unless
    # NCCL_SOCKET_IFNAME lets it in, and an address on it is one no other host can reach, so a
    # multi-host job's set-up never completes (set NCCL_SOCKET_IFNAME to the real NIC). lo alone
    # is a one-host job's deliberate choice and says nothing
    Cue("loopback-interface", "init_hang", "cause", re.compile(
        r"Using \[\d+\]lo[:%]127\.\S*(?: \[\d+\]\S+)* \[\d+\](?!lo[:%])\w|"
        r"Using \[\d+\](?!lo[:%])\w\S*(?: \[\d+\]\S+)* \[\d+\]lo[:%]127\.|"
        r"\bNET : Using interface lo:127\.")),
    Cue("peer-gone", "rank_died", "echo", re.compile(
        r"(?i)Connection (?:closed|reset) by (?:remote )?peer|ncclRemoteError|remote process exited|"
        r"peer (?:process )?(?:\w+ )?(?:closed|died|exited|hung up|disconnected)|Broken pipe|EPIPE|"
        r"ECONNRESET|lost connection to|other side closed|worker \w+ (?:has )?(?:died|disconnected|exited)|"
        + _XLA_PEER_CLOSED)),
    # Ray's words for a worker or a whole node gone: its GCS stopped hearing the node's heartbeats,
    # or an actor (a training worker) died in the middle of a task
    Cue("node-dead", "rank_died", "cause", re.compile(
        r"(?i)has been marked dead because the detector has missed too many heartbeats|"
        r"The actor died unexpectedly before finishing this task|"
        r"A worker died or was killed while executing (?:a|the) task")),
    # ps output with the job's children as zombies (state Z, <defunct>): processes that died and
    # were never reaped; in a training job, most often DataLoader workers
    Cue("zombie-children", "dataloader_stall", "cause", re.compile(
        r"\s(?:Z|Z[sl+<N]+)\s+\S+\s+\S+\s+\[?python[\d.]*\]? <defun|\[python[\d.]*\] <defunct>")),
    Cue("data-loading", "dataloader_stall", "cause", re.compile(
        r"(?i)DataLoader worker|DataLoader timed out|dataloader.{0,40}(?:timeout|timed out|hang|stuck|slow|deadlock)|"
        r"_try_get_data|pin_memory_thread|_MultiProcessingDataLoaderIter|worker_loop|data ?loader.{0,20}exited")),
    # SIGABRT is also how torch ends a rank whose collective timed out (and how a launcher
    # reports it: exitcode -6): a death, but one a wait may have caused
    Cue("abort", "rank_died", "cause", re.compile(
        r"(?i)SIGABRT|Signal 6\b|\bAborted\b|exit ?code\s*[:=]?\s*-6\b|exited with (?:exit )?(?:code|status)\s*[:=]?\s*(?:-6|134)\b|"
        r"(?:exit|return) (?:code|status)\s*[:=]?\s*134\b|terminate called (?:after throwing|without an active exception)"),
        unless=_AFTER_TIMEOUT),
    Cue("signal-death", "rank_died", "cause", re.compile(
        r"(?i)Segmentation fault|SIGSEGV|SIGABRT|SIGBUS|SIGILL|SIGFPE|SIGKILL|\bcore dumped\b|Fatal Python error|"
        r"terminate called (?:after throwing|without an active exception)|\bAborted\b|"
        r"(?:killed|terminated) by signal|exited on signal|received signal|Signal \d+ \(SIG\w+\)|"
        # UCX's and HPC-X's signal handler ("[host:pid:0:tid] Caught signal 7 (Bus error:
        # nonexistent physical address)"), and a crash handler's "!!! Segfault encountered !!!"
        r"Caught signal \d+ \((?:Bus error|Segmentation fault|Aborted|Illegal instruction|Floating point)|"
        r"\bSegfault encountered\b|"
        r"exit ?code\s*[:=]?\s*-\d+|exited with (?:exit )?(?:code|status)\s*[:=]?\s*-\d+|"
        r"(?:exit|return) (?:code|status)\s*[:=]?\s*(?:13[4-9]|-\d+)\b|"
        r"process \d+ (?:died|was killed)|(?:rank|worker|process|node) \d+ (?:died|crashed|was killed|is dead)"),
        unless=_AFTER_TIMEOUT),
    Cue("exit-nonzero", "rank_died", "cause", re.compile(
        r"(?i)exited with (?:exit )?(?:code|status)\s*[:=]?\s*[1-9]\d*|(?:exit|return) (?:code|status)\s*[:=]?\s*[1-9]\d*\b|"
        r"exitcode\s*:\s*[1-9]\d*|ChildFailedError|Killing subprocess|exited unexpectedly|"
        # (Python's header, in its case: Ascend CANN's error reports carry a "TraceBack (most
        # recent call last):" block of their own, the detail of an error already printed)
        r"Unhandled exception|(?-i:Traceback) \(most recent call last\)")),
    # c10d's store client timing out while it waits for a key (socket.cpp's waitForInput,
    # TCPStore::doWait "Socket Timeout", DistStoreError): set-up when it comes first, a rank that
    # is elsewhere when training or a phase of one rank's own came before it (weak_cues decides)
    Cue("store-timeout", "init_hang", "symptom", re.compile(
        r"(?i)waitForInput.{0,200}(?:timed out|timeout)|\bSocket Timeout\b|"
        r"TCPStore.{0,120}(?:timed out|timeout)|DistStoreError.{0,120}(?:timed out|timeout)|"
        r"wait timeout after \d+ ?ms.{0,80}keys?|Exception raised from doWait at \S*TCPStore|"
        # gloo's and Horovod's key-value stores (gloo/rendezvous, horovod's http_store.cc)
        r"\bWait timeout for key\(?s?\)?")),
    Cue("init", "init_hang", "cause", re.compile(
        r"(?i)Timed out initializing process group|store[_ ]based[_ ]barrier|Waiting in store based barrier|"
        r"Rendezvous(?:Timeout|Closed|Connection)Error|DistNetworkError|DistStoreError|TCPStore|"
        r"rendezvous.{0,60}(?:timeout|timed out|fail|waiting|hang|stuck)|"
        r"init_process_group.{0,80}(?:hang|stuck|timed out|never|blocks)|"
        r"(?:hang|stuck|blocks|waiting)\w*.{0,40}init_process_group|"
        r"client socket has (?:timed out|failed to connect)|Socket Timeout|"
        # c10d's TCPStore client before torch 1.13 (static_tcp_rendezvous, env:// init): "connect()
        # timed out. Original timeout was 900000 ms."; NCCL's init.cc given a rank >= nranks
        # ("Invalid rank requested : 2/2"): the launch handed out ranks wrong
        r"\bconnect\(\) timed out\. Original timeout|Invalid rank requested\s*:\s*\d+/\d+|"
        # torchelastic's etcd rendezvous giving a round up: a node's keep-alive lapsed, the round
        # is incomplete and destroyed, and the agents rendezvous again (the old spelling too)
        r"Keep-alive key \S+ is not renewed|Rende?z?vous version \d+ is incomplete|"
        # c10d's store could not open its socket at all (socket.cpp: errno 97 on an IPv6-less host)
        r"(?:server|client) socket cannot be initialized|server socket has failed to (?:listen|bind)|ncclCommInitRank.{0,40}(?:fail|hang|stuck|timeout)|"
        # NCCL's bootstrap finding no usable interface (socket.cc, bootstrap.cc)
        r"ncclSocketInit\b.{0,80}(?:neither|fail|error|invalid)|no socket interface found|"
        r"Bootstrap ?: ?no socket interface|NCCL_SOCKET_IFNAME.{0,80}(?:not found|no (?:such )?interface|does not exist)|"
        r"waiting for (?:all |the other |other )?(?:ranks|workers|nodes|processes) to (?:join|connect|start)|"
        r"waiting for .{0,40}\b(?:proc(?:ess)?(?:\(?e?s\)?)?|ranks?|workers?|nodes?|engines?) to (?:join|connect|start|come up|be ready)|"
        # a launch script polling for the master's host name (Kubernetes and PAI jobs: "nslookup:
        # can't resolve 'job-master-0'", "waiting for master"): the rendezvous has no address yet
        r"^waiting for (?:the )?master\b|^nslookup: can't resolve '[^'(]+'|"
        # torch's ncclUniqueId exchange through the store (ProcessGroupNCCL::broadcastUniqueNCCLID)
        r"broadcastUniqueNCCLID|ncclUniqueId|"
        # Ascend CANN's EJ0001 as torch_npu's HCCL set-up raises it ("Failed to initialize the
        # HCCP process. Reason: Maybe the last training process is running.")
        r"Failed to initialize the HCCP process|"
        # torch_xla's mesh service, its rendezvous (xla_client/mesh_service.cc): a worker waiting
        # for the mesh master, or its check that the channel connected failing
        r"Waiting to connect to client mesh master|mesh_service\.cc.{0,80}WaitForConnected|"
        # NCCL's socket.cc retrying a connect while it sets up (a port blocked, a peer not up)
        # (NCCL >= 2.2x: "ncclOsSocketStartConnect: connect to 127.0.0.1<52243> returned
        # Connection refused, retrying (1/34) after sleep for 100 msec")
        r"(?:Call to connect|connect to \S+) returned Connection (?:refused|timed out), retrying"),
        # c10d's own line that the store-based barrier of init_process_group passed; the NCCL
        # heartbeat monitor's poll of a store that went away ("Failed to check the "should dump"
        # flag on TCPStore, (maybe TCPStore server has shut down too early)"): the store was up,
        # and its host (rank 0) has exited, at the job's end or in its failure, not set-up
        unless=re.compile(r"(?i)Completed store-based barrier|"
                          r"TCPStore server has shut down too early")),
    Cue("mismatch-words", "collective_mismatch", "cause", re.compile(
        r"(?i)\bmismatch(?:ed|es)?\b|do(?:es)?(?: not|n't) match|different (?:shape|size|dtype|number of|order|sequence)|"
        r"inconsistent|unequal|uneven|sizes? differ|expected .{0,40} but (?:got|received)|"
        r"wrong (?:size|shape|number)|disagreement between rank ?\d+ and rank|"
        # FSDP's execution-order check: "Forward order differs across ranks: rank 0 is
        # all-gathering 1 parameters while rank 1 is all-gathering 0 parameters"
        r"\bdiffers? (?:across|between) (?:ranks|processes|workers)\b|"
        # Accelerate's verify_operation before 0.22 ("... due to inadequate shapes. All shapes on
        # the devices must be valid.")
        r"due to inadequate shapes"), _DIST,
        # two settings of one process that the program reconciled itself (accelerate: "Gradient
        # accumulation steps mismatch: GradientAccumulationPlugin has 1, DeepSpeed config has 4.
        # Using DeepSpeed's value."): no rank disagrees with another
        # DDP's reducer warning of one process's gradient layout ("Grad strides do not match
        # bucket view strides. This may indicate grad was not created according to the gradient
        # layout contract"): a copy it makes, every rank alike, no rank disagreeing
        unless=re.compile(r"(?i)mismatch.{0,160}\b(?:Using|will use|overrid(?:e|es|ing|den)|"
                          r"defaulting to|falling back to)\b.{0,40}\b(?:value|setting|config)|"
                          r"Grad strides do not match bucket view strides")),
    Cue("p2p-words", "p2p_deadlock", "cause", re.compile(
        r"(?i)\b(?:isend|irecv|send|recv|batch_isend_irecv|p2p|point-to-point|send/recv|SendRecv)\b.{0,80}"
        r"(?:deadlock|hang|hangs|stuck|blocks forever|never (?:returns|completes))|"
        r"(?:deadlock|hang|hangs|stuck).{0,80}\b(?:isend|irecv|send|recv|batch_isend_irecv|p2p|point-to-point)\b")),
    # torch's heartbeat monitor: the watchdog thread itself is blocked, "typically ... a NCCL/CUDA
    # API (e.g., CudaEventDestroy) hang blocking the watchdog", which "could be triggered by
    # another thread holding the GIL": most often a collective that never completes because a
    # peer is not in it (an abort or an event query that waits on it), a GIL deadlock the rarer
    Cue("watchdog-stuck", "missing_rank", "symptom", re.compile(
        r"(?i)watchdog (?:thread )?got stuck for|Heartbeat monitor timed out|"
        r"watchdog (?:thread )?(?:is |was )?(?:hung|stuck|blocked)")),
    Cue("thread-deadlock", "python_deadlock", "cause", re.compile(
        r"(?i)\bdeadlock\w*.{0,60}\b(?:thread|lock|mutex|GIL|threading)\b|"
        r"\b(?:thread|lock|mutex|GIL)\b.{0,60}\bdeadlock")),
    Cue("slow-words", "straggler", "cause", re.compile(
        r"(?i)\bstraggl\w*|slow(?:er|ness|down)? (?:rank|node|gpu|worker|host|iteration|step|training)|"
        r"(?:throughput|speed|performance|TFLOPS|MFU) (?:drop|degrad|decreas)\w*|much slower|"
        r"(?:iteration|step) time (?:increas|grow|jump)\w*"),
        # a straggler detector's own heading or all-clear names the word, not a slow rank
        # (its findings are read in full: sources/logs/perf_reports.py)
        # (and a counter of them that reads none: "straggle_events=none", "stragglers: 0")
        unless=re.compile(r"(?i)straggler (?:report|detection\b(?! warning))|no stragglers?\b|"
                          r"\bstraggl\w*\s*[=:]\s*(?:none|0|\[\])(?![\w.])")),
    # Horovod's stall inspector (stall_inspector.cc) with no per-rank list after it: some ranks
    # submitted a tensor 60 s before the rest; the lists, where a paste has them, say who
    # (sources/logs/stall_reports.py); alone it says a rank is behind, not which or why
    Cue("horovod-stall", "straggler", "symptom", re.compile(
        r"submitted to be reduced, gathered or broadcasted by subset of ranks and are waiting for "
        r"remainder of ranks")),
    Cue("version-skew", "config_skew", "cause", re.compile(
        r"(?i)version mismatch|mismatched versions?|different versions? of|versions? (?:differ|do not match)|"
        r"incompatible (?:version|NCCL|driver|CUDA)")),
    # a phase one process runs while the others wait (evaluation, a checkpoint, a dataset scan),
    # or a progress bar cut short: what rank 0 was doing when the others' collective timed out
    Cue("busy-phase", "missing_rank", "symptom", re.compile(
        r"^(?:\w+: )?(?:Evaluat|Validat|Saving|Scanning|Caching|Building|Preprocess|Tokeniz|Grouping|"
        r"Loading|Downloading|Processing|Filtering|Mapping|Writing|Exporting|Testing|Computing|Generating)\w*\b|"
        r"^[^|\n]{0,300}?\b(?:[0-9]|[1-9][0-9])%\||"
        # tqdm rounds 497/499 up to "100%": the count says the bar is not done
        r"^[^|\n]{0,300}?\b100%\|[^|\n]{0,200}\|\s*(\d+)/(?!\1\b)\d+")),
    Cue("wait-timeout", "missing_rank", "symptom", re.compile(
        r"(?i)Watchdog caught collective operation timeout|\btimed[ -]out\b|Timeout(?:Error|Exception)|"
        r"\btime ?outs?\b(?= (?:at|after|while|waiting|error|exceeded|expired|reached|occurred|happened)\b)|no progress|heartbeat (?:lost|timeout|missed)|"
        # vLLM's message queue (shm_broadcast.py): its writer found no block the readers (the
        # workers) had freed for a minute: a worker stopped reading, stuck or busy elsewhere
        r"No available shared memory broadcast block found in \d+ seconds?"), _DIST),
    # a traceback's last line where the paste cut its head ("[rank5]: IndexError: The shape of
    # ..."): last, so that any line a cue above reads more specifically is filed under it
    Cue("exception", "rank_died", "cause", re.compile(
        r"^ {0,2}(?:[a-z_]\w*\.)*[A-Z][A-Za-z]*(?:Error|Exception): ")),
)
# A superset of the cues, searched on the raw line (launcher prefix and all): a cue anchored at
# the start of the line's body (``^Evaluating``) is unanchored here, since the prefix is peeled
# only for the lines this lets through. So is the bounded run a cue allows before its words
# (``^[^|\n]{0,300}?\b...``): unanchored, it would be tried for 300 characters from every place.
_LINE_START = re.compile(r"(?:(?<=^)|(?<=\|))\^(?:\[\^[^\]]{1,20}\]\{0,\d+\}\??)?")
# Process-group set-up as torch, launchers and frameworks log it while it is under way: a log
# whose last lines are these stopped inside set-up (cue ``setup-stops``, read on the log's last
# ``SETUP_LAST`` lines only; a line that says set-up completed is none of these)
_SETUP = re.compile(
    r"(?i)server socket (?:has started to listen|will attempt to listen|is attempting to listen)|"
    r"client socket will attempt to connect|Initiali[sz]ing (?:\d+ )?(?:the )?(?:process group|distributed|torch\.distributed|TorchBackend|ddp|deepspeed)|"
    # vLLM's and sglang's communicator set-up (pynccl loading libnccl; sglang's own begin line)
    r"\bis using nccl ?==|Found nccl from|Init torch distributed begin|"
    r"Using distributed PyTorch|Added key: store_based_barrier_key|distributed init \(rank \d+\)|"
    r"Rendezvous'ing worker group|Starting elastic_operator|init(?:ializ(?:e|ing))?_process_group\b(?!.{0,40}(?:done|complete|finished|success))|"
    r"(?:setting up|set up|starting) (?:the )?(?:distributed|process group|ddp|nccl|rendezvous)\b(?!.{0,40}(?:done|complete|finished))|"
    # a rank's print of its own distributed settings, the line scripts log just before
    # init_process_group ("Namespace(backend='gloo', init_method='tcp://10.0.0.1:23456', rank=0,
    # world_size=3)", detectron2's "dist_url='tcp://127.0.0.1:50152'")
    r"\b(?:init_method|dist_url|dist-url)['\"]?\s*[=:]\s*['\"]?(?:tcp|env|file)://")
SETUP_LAST = 3
SETUP_CUE = Cue("setup-stops", "init_hang", "symptom", _SETUP)
_ALTERNATIVES = [_LINE_START.sub("", cue.pattern.pattern.removeprefix("(?i)")) for cue in CUES]
# searched behind a gate: each cue's regex only on the lines that hold a word it requires
_PREFILTER = LiteralGate(_ALTERNATIVES, re.IGNORECASE)
# (torch.multiprocessing.spawn's "process 0 terminated with signal SIGKILL" names its process
# index, the rank of a one-node job; Ray's memory monitor the task it killed: "where the task
# (task ID: ..., name=head, rank=0, pid=4503, ...)")
_MSG_RANK = re.compile(r"(?i)where the (?:task|worker|actor) \([^)]{0,300}?\brank=(?P<r3>\d+)|"
                       # torch_npu's error heads: "(PID:927000, Device:3, RankID:3)"
                       r"\bRankID\s*[:=]\s*(?P<r4>\d+)|"
                       r"\b(?:global[_ ]?)?rank\s*[=:#]?\s*\[?(?P<r>\d+)\]?|"
                       r"\bprocess (?P<r2>\d+) terminated with\b")
# a frame of c10's C++ backtrace under "Exception raised from X at file:line (most recent call
# first):" ("frame #4: c10d::TCPStore::check(...) + 0x371 (0x7fff in libtorch_cpu.so)"): a
# store's own method there is how any read of a key looks (the NCCL heartbeat monitor polling
# the store at the job's end, too), so it says nothing of set-up; the caller's frame does
# (broadcastUniqueNCCLID: the wait for the NCCL id)
_CXX_FRAME = re.compile(r"\s*frame #\d+: ")
_STORE_CALL = re.compile(r"c10d::(?:TCP|Prefix|Hash|File)Store::\w+")
# the job's size as set-up lines state it: Lightning's "MEMBER: 2/8", "world_size=8", "nranks 8"
_WORLD = re.compile(r"(?i)\bMEMBER: \d+/(?P<a>\d+)|\bworld[_ ]size\s*[=:]?\s*(?P<b>\d+)|"
                    r"\bnranks\s*[=:]?\s*(?P<c>\d+)")


def _msg_rank(body: str) -> tuple[int, str] | None:
    """The rank a line's message names, and its source: ``launcher`` where a launcher or a
    monitor names the process it saw die (as good as that process's own prefix), else
    ``content``."""
    m = _MSG_RANK.search(body)
    if m is None:
        return None
    if (named := m.group("r") or m.group("r4")) is not None:
        return int(named), "content"
    return int(m.group("r2") or m.group("r3")), "launcher"


def classify(body: str, cues: Sequence[Cue] = CUES) -> Cue | None:
    """The first cue ``body`` carries, or None. ``cues``: the ones that may (in CUES' order)."""
    for cue in cues:
        if cue.pattern.search(body) and (cue.needs is None or cue.needs.search(body)) \
                and (cue.unless is None or not cue.unless.search(body)):
            return cue
    return None


def scan_cues(path: str, rank_hint: int | None = None,
              tail: LogicalTail | None = None) -> list[LogEvent]:
    """``tail``: the log's logical tail where the caller already has it (a cue cut by a
    terminal's wrap is read rebuilt)."""
    tail = tail or logical_tail(path, rank_hint)
    if tail is None:
        return []
    ctx = tail.ctx
    out: list[LogEvent] = []
    last = set(tail.last_said(SETUP_LAST))
    spawned: int | None = None  # the process a spawn header names, for its traceback's lines
    for index in range(len(tail.lines)):
        if index in tail.skip:
            continue
        text = tail.text(index)
        if "terminated with the following error" in text and \
                (header := SPAWN_HEADER.search(text)) is not None:
            spawned = int(header.group(1))
            continue
        at_end = index in last and _SETUP.search(text) is not None
        # (a cue that matches the line's body matches its raw text in the superset's form)
        possible = _PREFILTER.matching(text)
        if not at_end and not possible:
            continue
        line = parse_line(text, tail.line_no(index), ctx)
        body = line.body[:2000]
        if possible and _CXX_FRAME.match(body):
            body = _STORE_CALL.sub("", body)
        cue = classify(body, [CUES[i] for i in possible])
        if cue is None and at_end:
            cue = SETUP_CUE
        if cue is None:
            continue
        rank, source = line.rank, line.rank_source and "prefix"
        # a phase line's rank is its stream's: a rank named later on the line (a timeout glued
        # to a progress bar) is another process's
        if rank is None and cue.name != "busy-phase" and (named := _msg_rank(line.body)):
            rank, source = named
        if rank is None and spawned is not None and cue.name == "exception":
            # the exception that ends the traceback torch.multiprocessing.spawn printed under
            # "-- Process N terminated with the following error:": process N's, the rank of a
            # one-node job
            rank, source, spawned = spawned, "launcher", None
        fields: dict[str, str | int | float] = {"suggests": cue.suggests, "cue": cue.name,
                                                "role": cue.role}
        if rank is not None:
            event = make_event("cue", line, ctx, "info", fields, rank=rank, rank_source=source)
        else:
            event = make_event("cue", line, ctx, "info", fields)
        out.append(event)
        if len(out) >= MAX_CUES:
            break
    if any(e.fields.get("cue") == "setup-stops" for e in out):
        _who_set_up(tail, out)
    if any(e.fields.get("cue") == "loopback-interface" for e in out):
        out = _loopback_beside_another(tail, out)
    return out


_OLD_INTERFACE = re.compile(r"^(?P<head>\S+:\d+:\d+) .*\bNET : Using interface (?P<name>[\w.\-]+):")


def _loopback_beside_another(tail: LogicalTail, out: list[LogEvent]) -> list[LogEvent]:
    """NCCL < 2.4's "NET : Using interface lo:..." is a cue only where the same process names
    another interface too (lo alone: a one-host job's own choice)."""
    others: set[str] = set()
    for index in range(len(tail.lines)):
        if index in tail.skip:
            continue
        found = _OLD_INTERFACE.search(tail.text(index))
        if found is not None and found.group("name") != "lo":
            others.add(found.group("head"))
    def keep(event: LogEvent) -> bool:
        if event.fields.get("cue") != "loopback-interface" or "NET : Using interface" not in \
                event.message:
            return True
        found = _OLD_INTERFACE.search(event.message)
        return found is not None and found.group("head") in others
    return [event for event in out if keep(event)]


def _who_set_up(tail: LogicalTail, out: list[LogEvent]) -> None:
    """Where the log stops in set-up: the ranks whose set-up lines it shows anywhere, and the
    job's size where a set-up line states it, on each ``setup-stops`` event (fields ``set_up``,
    ``world``): the ranks that never got as far are the ones set-up waits for."""
    ranks: set[int] = set()
    world = 0
    for index in range(len(tail.lines)):
        if index in tail.skip:
            continue
        text = tail.text(index)
        if _SETUP.search(text) is None:
            continue
        line = parse_line(text, tail.line_no(index), tail.ctx)
        rank = line.rank
        if rank is None and (named := _msg_rank(line.body)):
            rank = named[0]
        if rank is not None:
            ranks.add(rank)
        if (w := _WORLD.search(line.body)) is not None:
            world = max(world, int(w.group("a") or w.group("b") or w.group("c")))
    for event in out:
        if event.fields.get("cue") == "setup-stops" and ranks:
            event.fields["set_up"] = ",".join(map(str, sorted(ranks)))
            if world:
                event.fields["world"] = world
