"""Which of the locals ``py-spy dump --locals`` prints hangscope keeps: only what names a p2p peer.

A rank blocked in ``dist.recv(buf, src=2)`` has a ``recv`` frame whose ``src`` local is the peer;
a rank blocked in ``req.wait()`` on an ``irecv`` has only its own frame, whose locals hold the
variable the peer was passed in (``prev_stage: 2``) and the ``Work`` it waits on. Those are kept;
every other local is dropped before anything is stored or analyzed, because locals may hold
secrets (tokens, paths, user data) and a bundle travels:

- in a torch.distributed p2p frame (``send``/``recv``/``isend``/``irecv``/...): the int arguments
  ``dst``, ``src``, ``peer``, ``group_dst``, ``group_src``, and ``tag`` (gloo matches a send to a
  receive by it: two ranks that face each other with different tags wait for ever);
- in any other frame outside installed packages (the job's own code): int locals whose name reads
  like a peer or a rank (``prev_stage``, ``next_rank``, ``src``, ``peer``, ``left``, ``to_rank``);
- a local whose value is a torch ``Work`` (``<torch._C._distributed_c10d.Work at 0x...>``): its
  name only, the repr replaced by ``<Work>``.

An int is kept as an int; any other repr (a string, a tensor, a dict...) is dropped whatever the
name. py-spy 0.4's JSON: ``"locals": [{"name", "addr", "arg", "repr"}]`` per frame, ``null``
without ``--locals``; its text prints ``Arguments:`` and ``Locals:`` blocks of ``name: repr``.
"""

from __future__ import annotations

import re
from typing import Any

from hangscope.model import FrameLocal

WORK_REPR = "<Work>"
P2P_FUNCS = frozenset({"send", "recv", "isend", "irecv", "batch_isend_irecv", "send_object_list",
                       "recv_object_list", "_coalescing_manager", "P2POp.__init__",
                       "P2POp.__new__"})
P2P_PEER_ARGS = frozenset({"dst", "src", "peer", "group_dst", "group_src", "group_peer"})
P2P_KEPT_ARGS = P2P_PEER_ARGS | {"tag"}
_PEER_WORDS = frozenset({"src", "dst", "peer", "prev", "previous", "next", "nxt", "left", "right",
                         "rank", "stage", "neighbor", "neighbour", "dest", "source", "target",
                         "sender", "receiver", "from", "to", "upstream", "downstream", "pred",
                         "succ"})
_INT = re.compile(r"^-?\d{1,9}$")
_WORK = re.compile(r"^<(?:[\w.]+\.)?Work at 0x[0-9a-fA-F]+>$|^<Work>$")
_INSTALLED = re.compile(r"(^|/)(site-packages|dist-packages)/|^torch/|/lib/python3\.\d+/")


def is_p2p_frame(name: str, filename: str) -> bool:
    """A torch.distributed p2p call's own frame (full or py-spy's short path)."""
    return filename.endswith("torch/distributed/distributed_c10d.py") and name in P2P_FUNCS


def peer_like(name: str) -> bool:
    """``prev_stage``, ``next_rank``, ``src``, ``recv_from``, ``left``: a name a peer is kept in."""
    return any(word in _PEER_WORDS for word in re.split(r"[_\d]+", name.lower()) if word)


def keep_local(func: str, filename: str, name: str, text: str) -> str | None:
    """The repr to keep for local ``name`` (repr ``text``) of frame ``func`` in ``filename``, or
    None to drop it (see the module docstring)."""
    text = text.strip()
    if _WORK.match(text):
        return WORK_REPR
    if not _INT.match(text):
        return None
    if is_p2p_frame(func, filename):
        return text if name in P2P_KEPT_ARGS else None
    if _INSTALLED.search(filename):
        return None
    return text if peer_like(name) else None


def frame_local(index: int, name: str, kept: str) -> FrameLocal:
    return FrameLocal(index, name[:200], None if kept == WORK_REPR else int(kept))


def locals_from_json(index: int, raw: dict[str, Any]) -> list[FrameLocal]:
    """The kept locals of one py-spy JSON frame."""
    found: list[FrameLocal] = []
    items = raw.get("locals")
    if not isinstance(items, list):
        return found
    func, filename = str(raw.get("name", "")), str(raw.get("filename", ""))
    for item in items[:500]:
        if not isinstance(item, dict):
            continue
        name, text = item.get("name"), item.get("repr")
        if isinstance(name, str) and isinstance(text, str):
            kept = keep_local(func, filename, name, text)
            if kept is not None:
                found.append(frame_local(index, name, kept))
    return found


def sanitize_dump(doc: Any) -> Any:
    """A py-spy JSON dump with every local ``keep_local`` drops removed (in place; returned).
    What the collector stores in a bundle."""
    if not isinstance(doc, list):
        return doc
    for thread in doc:
        frames = thread.get("frames") if isinstance(thread, dict) else None
        for raw in frames if isinstance(frames, list) else ():
            if not isinstance(raw, dict) or not isinstance(raw.get("locals"), list):
                continue
            func, filename = str(raw.get("name", "")), str(raw.get("filename", ""))
            kept = []
            for item in raw["locals"]:
                if not isinstance(item, dict):
                    continue
                name, text = item.get("name"), item.get("repr")
                if isinstance(name, str) and isinstance(text, str):
                    value = keep_local(func, filename, name, text)
                    if value is not None:
                        kept.append({"name": name, "arg": bool(item.get("arg")), "repr": value})
            raw["locals"] = kept
    return doc
