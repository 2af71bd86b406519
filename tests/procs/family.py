"""A Python process with N multiprocessing children (fork | spawn | forkserver | none).

    python family.py READY_FILE MODE N

Writes READY_FILE = {"pid": ..., "children": [...]} once every child runs, then sleeps until
killed. The children block forever (like idle DataLoader workers waiting for an index).
"""

import json
import multiprocessing as mp
import os
import sys
import time


def idle() -> None:
    while True:
        time.sleep(3600)


def main() -> None:
    ready, mode, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    children = []
    if mode != "none":
        ctx = mp.get_context(mode)
        for _ in range(n):
            child = ctx.Process(target=idle, daemon=True)
            child.start()
            children.append(child.pid)
    tmp = f"{ready}.tmp"
    with open(tmp, "w") as handle:
        json.dump({"pid": os.getpid(), "children": children}, handle)
    os.replace(tmp, ready)
    idle()


if __name__ == "__main__":
    main()
