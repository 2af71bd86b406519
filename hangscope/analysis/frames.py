"""Where a frame's code lives by its full path, and what a native frame's name says it waits for;
``analysis.stacks`` builds on this for the short paths py-spy's text format prints and for the
classification of whole threads."""

from __future__ import annotations

import re

from hangscope.model import Frame

_LIBRARY_MARKERS = ("/site-packages/", "/dist-packages/", "/lib/python3", "<frozen ", "<string>")


def is_library_frame(frame: Frame) -> bool:
    """Frames from installed packages or the standard library, not the job's own code."""
    return frame.native or any(marker in frame.filename for marker in _LIBRARY_MARKERS)


# --------------------------------------------------------------------------------------------------
# Native frames by name (gdb backtraces, py-spy --native)

# Waits for the GIL or a C mutex: a thread here holds nothing and waits for whoever holds it.
# (``drop_gil`` blocks too: a thread forced to switch waits there until another takes the GIL.)
_GIL = re.compile(r"^(take_gil|drop_gil|PyEval_AcquireThread|PyEval_RestoreThread"
                  r"|PyEval_AcquireLock|PyGILState_Ensure"
                  r"|pybind11::gil_scoped_acquire::gil_scoped_acquire)$")
_MUTEX = re.compile(r"^(__lll_lock_wait\w*|(__GI_)?_*pthread_mutex_(timed|clock)?lock\w*"
                    r"|__kmp_\w*(lock|wait)\w*|std::(recursive_)?mutex::lock"
                    r"|__gthread_(recursive_)?mutex_lock|\w*futex_(abstimed_)?wait\w*)$")
# glibc's list of exit handlers: registering one (a C++ static's destructor, on first use) takes
# __exit_funcs_lock, which a process forked while another thread held it never gets back
_ATEXIT = re.compile(r"^(__internal_atexit|__new_exitfn|(__GI_)?_*cxa_atexit)$")
_NCCL_COMM_INIT = re.compile(r"ProcessGroupNCCL::(getNCCLComm|initNCCLComm|ProcessGroupNCCL)\b|"
                             r"^p?ncclCommInit\w*$|^p?ncclCommSplit$")
# A grouped NCCL launch (torch's coalescing manager, batch_isend_irecv) that does not return:
# ncclGroupEnd waits for its peers only while it sets up point-to-point connections (collective
# channels connect when the communicator is created, that is under getNCCLComm, an init wait).
# False positive: NCCL >= 2.22 connects collectives lazily too (NCCL_RUNTIME_CONNECT).
_NCCL_GROUP = re.compile(r"ProcessGroupNCCL::(endCoalescing|groupEnd)\b|^p?ncclGroupEnd$|"
                         r"^ncclGroupEndInternal$|^groupLaunch$")


def native_lock(name: str) -> str | None:
    """``GIL``, ``mutex`` or ``atexit lock`` for a native frame that waits on one, else None."""
    if _GIL.match(name):
        return "GIL"
    if _MUTEX.match(name):
        return "mutex"
    if _ATEXIT.match(name):
        return "atexit lock"
    return None


def is_nccl_comm_init(name: str) -> bool:
    """NCCL communicator creation (torch creates it at a group's first collective)."""
    return _NCCL_COMM_INIT.search(name) is not None


def is_nccl_group_launch(name: str) -> bool:
    """A grouped NCCL launch (``ncclGroupEnd``, torch's ``endCoalescing``)."""
    return _NCCL_GROUP.search(name) is not None


# MPI's own blocking calls (Horovod's coordinator loop, mpi4py, torch's MPI backend); the
# request waits (MPI_Wait*) are left out: they finish a send, a receive or a collective alike
_MPI_CALL = re.compile(r"^P?MPI_(Allreduce|Reduce|Reduce_scatter\w*|Allgatherv?|Gatherv?|Scatterv?|"
                       r"Bcast|Barrier|Alltoallv?|Send|Recv|Sendrecv)\b")
_MPI_P2P = frozenset({"Send", "Recv", "Sendrecv"})


def mpi_call(name: str) -> tuple[bool, str] | None:
    """(is point-to-point, ``MPI_Gather``) for a native frame of an MPI call that blocks."""
    m = _MPI_CALL.match(name)
    if m is None:
        return None
    return m.group(1) in _MPI_P2P, f"MPI_{m.group(1)}"
