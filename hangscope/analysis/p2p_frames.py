"""Which peer a rank's main thread waits on in a point-to-point op, read from its stack.

gloo's flight recorder records no send/recv, so a pipeline deadlock is seen only in the stacks;
to build rank -> peer edges the peer must come from there too. Three shapes, first match wins:

1. The thread is inside a torch p2p call (``recv``, ``send``, ``send_object_list``...): the call's
   own frame holds ``src``/``dst`` (``group_src``/``group_dst`` in newer torch) when py-spy read
   locals (``--locals``; ``sources/pyspy_locals.py`` keeps only those).
2. The thread waits on a ``Work`` of ``isend``/``irecv`` (``req.wait()``): py-spy shows no frame
   for the wait (a C method) unless ``--native`` (``c10d::ProcessGroupGloo::RecvWork::wait``), so
   the stack ends at the job's line. The call that made the Work is read from the source lines
   (carried in the bundle: ``req = dist.irecv(buf, src=prev_stage)`` a few lines above, or
   ``dist.irecv(buf, src=prev_stage).wait()``), and its peer expression is evaluated over the
   frame's kept int locals (names, int literals, + - * // %).
3. No source line: the Work's direction from a native ``SendWork``/``RecvWork`` frame or the
   Work variable's name (``recv_req``), the peer from the one kept int local whose name says that
   direction (``prev_stage``/``src``/``left`` for a recv; ``next_stage``/``dst``/``right`` for a
   send) or is ``peer``. A guess from names: said so in ``how``.

False negatives: ``batch_isend_irecv`` (its P2POp list shows no peers in py-spy), a peer computed
from locals that are not kept (``(rank + 1) % world``: ``world`` is not peer-like), a Work made
far from its wait. A group rank (``group_src``) is taken as the global rank.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from dataclasses import dataclass

from hangscope.model import Frame, FrameLocal, ThreadStack
from hangscope.sources.pyspy_locals import P2P_FUNCS, is_p2p_frame
from hangscope.sources.source_lines import line_text

_SENDS = frozenset({"send", "isend", "send_object_list"})
_RECVS = frozenset({"recv", "irecv", "recv_object_list"})
_GLOBAL_ARGS = ("src", "dst", "peer")
_GROUP_ARGS = ("group_src", "group_dst", "group_peer")
_NATIVE_WAIT = re.compile(r"(Send|Recv)Work::wait")
_WAIT_ON = re.compile(r"(?:^|[^\w.])([A-Za-z_]\w*(?:\[[^\]]*\])?)\.wait\(")
_RECV_WORDS = frozenset({"src", "prev", "previous", "left", "from", "source", "sender",
                         "upstream", "pred"})
_SEND_WORDS = frozenset({"dst", "next", "nxt", "right", "to", "dest", "target", "receiver",
                         "downstream", "succ"})
LOOK_BACK = 12  # lines above a wait searched for the call that made its Work


@dataclass(frozen=True, slots=True)
class P2pWait:
    """The p2p op a main thread is blocked in: ``op`` "send" or "recv" (None: unknown, e.g. a
    batch), ``peer`` the global rank it waits on (None: unknown), ``call`` what the code called
    (``irecv``, ``recv``...), ``frame`` the job's frame to cite, ``how`` where the peer was read."""

    op: str | None
    peer: int | None
    call: str
    frame: Frame | None
    how: str
    tag: int | None = None  # the call's ``tag`` argument, where py-spy read it

    def clause(self) -> str:
        """``waits to receive from rank 2`` / ``waits to send to rank 1``."""
        if self.op == "recv":
            what = "to receive from"
        elif self.op == "send":
            what = "to send to"
        else:
            what = "in p2p with"
        tag = f" (tag {self.tag})" if self.tag is not None else ""
        return f"waits {what} rank {self.peer}{tag}" if self.peer is not None else \
            f"waits in {self.call} (peer unknown){tag}"


def p2p_wait(thread: ThreadStack, lines: Mapping[str, Mapping[int, str]],
             native: ThreadStack | None = None) -> P2pWait | None:
    """The p2p op ``thread`` waits in, with its peer where the frames tell it (module docstring);
    None when the thread is not in one. ``native``: the same thread in a ``--native`` dump."""
    frames = thread.frames
    inside = [i for i, f in enumerate(frames) if not f.native and is_p2p_frame(f.name, f.filename)]
    if inside:
        return _inside_call(thread, inside)
    user = next((i for i, f in enumerate(frames) if not f.native and not _installed(f)), None)
    if user is None or any(not f.native for f in frames[:user]):
        return None  # a Python library call (Queue.get, Lock.acquire) is what it waits in
    frame = frames[user]
    kept = {loc.name: loc for loc in thread.locals if loc.frame == user}
    direction = _native_direction(native or thread)
    text = line_text(lines, frame.filename, frame.line) if frame.line else None
    if text is not None:
        found = _from_source(frame, text, lines, kept, direction)
        if found is not None:
            return found
    works = [name for name, loc in kept.items() if loc.value is None]
    if direction is None and text is None and len(works) == 1:
        direction = "recv" if "recv" in works[0] else "send" if "send" in works[0] else None
    if direction is None or (text is not None and ".wait(" not in text):
        return None
    return _from_names(frame, kept, direction)


def _installed(frame: Frame) -> bool:
    return bool(re.search(r"(^|/)(site-packages|dist-packages)/|^torch/|/lib/python3\.\d+/",
                          frame.filename))


def _inside_call(thread: ThreadStack, inside: list[int]) -> P2pWait:
    outer = thread.frames[inside[-1]]
    op = "send" if outer.name in _SENDS else "recv" if outer.name in _RECVS else None
    caller = next((f for f in thread.frames[inside[-1] + 1:] if not f.native), None)
    tag = next((loc.value for index in inside for loc in thread.locals
                if loc.frame == index and loc.name == "tag" and loc.value is not None), None)
    for index in reversed(inside):  # outermost first: send_object_list's own dst before send's
        kept = {loc.name: loc.value for loc in thread.locals if loc.frame == index}
        for names, note in ((_GLOBAL_ARGS, ""), (_GROUP_ARGS, ", a group rank")):
            for name in names:
                value = kept.get(name)
                if value is not None:
                    where = thread.frames[index].name
                    return P2pWait(op, value, outer.name, caller or outer,
                                   f"{where}({name}={value}){note}, a local py-spy read", tag)
    return P2pWait(op, None, outer.name, caller or outer,
                   "no peer argument in the dump (taken without --locals?)", tag)


def _native_direction(thread: ThreadStack) -> str | None:
    for frame in thread.frames:
        if frame.native:
            match = _NATIVE_WAIT.search(frame.name)
            if match:
                return match.group(1).lower()
    return None


def _from_source(frame: Frame, text: str, lines: Mapping[str, Mapping[int, str]],
                 kept: dict[str, FrameLocal], direction: str | None) -> P2pWait | None:
    """``dist.irecv(buf, src=p).wait()`` on the line, or ``req.wait()`` with ``req = ...irecv(...)``
    on a line above it."""
    call = _p2p_call(text)
    if call is None:
        waited = _WAIT_ON.search(text)
        if waited is None or not frame.line:
            return None
        var = waited.group(1).split("[")[0]
        for number in range(frame.line - 1, max(0, frame.line - LOOK_BACK), -1):
            above = line_text(lines, frame.filename, number)
            if above is None:
                break
            if re.search(rf"\b{re.escape(var)}\s*(\[[^\]]*\])?\s*=", above):
                call = _p2p_call(above)
                break
        if call is None:
            return None
    name, expr = call
    op = "send" if name in _SENDS else "recv"
    if direction is not None and direction != op:
        return None  # the native frame says otherwise: not this call
    values = {n: loc.value for n, loc in kept.items() if loc.value is not None}
    peer = _evaluate(expr, values) if expr else None
    arg = "src" if op == "recv" else "dst"
    if peer is None:
        how = (f"{name}({arg}={expr}) in the source; {expr} is not among the kept locals"
               if expr else f"{name}(...) in the source, with no peer argument read")
    elif expr and expr.lstrip("-").isdigit():
        how = f"{name}({arg}={expr}) in the source"
    else:
        how = f"{name}({arg}={expr}) in the source, {expr} = {peer} in the frame's locals"
    return P2pWait(op, peer, name, frame, how)


def _p2p_call(text: str) -> tuple[str, str | None] | None:
    """The first isend/irecv/send/recv call of a source line: (its name, its peer's text)."""
    code = text.strip()
    tree = None
    for attempt in (code, code + " pass", code.rstrip(":") + ": pass"):
        try:
            tree = ast.parse(attempt)
            break
        except SyntaxError:
            continue
    if tree is None:
        return None
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else \
            func.id if isinstance(func, ast.Name) else None
        if name in _SENDS or name in _RECVS:
            return name, _peer_expr(node, "send" if name in _SENDS else "recv")
    return None


def _peer_expr(call: ast.Call, op: str) -> str | None:
    """The peer argument's text in a call (keyword, else second positional)."""
    names = ("src", "group_src", "peer", "group_peer") if op == "recv" else \
        ("dst", "group_dst", "peer", "group_peer")
    for keyword in call.keywords:
        if keyword.arg in names:
            return ast.unparse(keyword.value)
    return ast.unparse(call.args[1]) if len(call.args) >= 2 else None


_BINOPS = {ast.Add: int.__add__, ast.Sub: int.__sub__, ast.Mult: int.__mul__,
           ast.FloorDiv: int.__floordiv__, ast.Mod: int.__mod__}


def _evaluate(expr: str, values: Mapping[str, int]) -> int | None:
    """An int expression over ``values``: names, int literals, + - * // %, unary minus."""
    try:
        node = ast.parse(expr, mode="eval").body
    except SyntaxError:
        return None

    def walk(n: ast.AST) -> int | None:
        if isinstance(n, ast.Constant) and type(n.value) is int:
            return n.value
        if isinstance(n, ast.Name):
            return values.get(n.id)
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
            inner = walk(n.operand)
            return -inner if inner is not None else None
        if isinstance(n, ast.BinOp) and type(n.op) in _BINOPS:
            left, right = walk(n.left), walk(n.right)
            if left is None or right is None or (right == 0 and
                                                 isinstance(n.op, (ast.Mod, ast.FloorDiv))):
                return None
            return int(_BINOPS[type(n.op)](left, right))
        return None

    return walk(node)


def _from_names(frame: Frame, kept: dict[str, FrameLocal], direction: str) -> P2pWait:
    """The peer from the one int local named for ``direction`` (or ``peer``): a guess."""
    words = _RECV_WORDS if direction == "recv" else _SEND_WORDS
    found = {}
    for name, loc in kept.items():
        parts = set(re.split(r"[_\d]+", name.lower()))
        if loc.value is not None and (parts & words or "peer" in parts):
            found[name] = loc.value
    call = "irecv" if direction == "recv" else "isend"
    if len(set(found.values())) == 1:
        name, value = next(iter(found.items()))
        return P2pWait(direction, value, f"{call}.wait", frame,
                       f"{name}={value}, the one local of {frame.name} named for a "
                       f"{direction} peer (no source line: a guess from names)")
    return P2pWait(direction, None, f"{call}.wait", frame, "peer not told by the kept locals")


__all__ = ["P2P_FUNCS", "P2pWait", "p2p_wait"]
