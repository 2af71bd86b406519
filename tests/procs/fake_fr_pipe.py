"""Stands in for a NCCL rank's dump-pipe reader (ProcessGroupNCCL's monitor thread).

    python fake_fr_pipe.py PIPE DUMP READY MODE

Creates the FIFO PIPE, opens it O_RDONLY|O_NONBLOCK like torch does, writes READY
({"pid": ...}), then polls it. MODE "dump": each time bytes arrive, write DUMP in two chunks
(the way an ofstream fills a file) with a short pause between, and the time it was poked. MODE "ignore": read and do nothing.
"""

import json
import os
import sys
import time


def main() -> None:
    pipe, dump, ready, mode = sys.argv[1:5]
    os.mkfifo(pipe)
    fd = os.open(pipe, os.O_RDONLY | os.O_NONBLOCK)
    with open(ready + ".tmp", "w") as handle:
        json.dump({"pid": os.getpid()}, handle)
    os.replace(ready + ".tmp", ready)
    pokes = 0
    while True:
        try:
            data = os.read(fd, 128)
        except BlockingIOError:
            data = b""
        if data and mode == "dump":
            pokes += 1
            poked_at = time.time()
            with open(dump, "wb") as out:
                out.write(b'{"version": "2.10", "pg_config": {}, ')
                out.flush()
                time.sleep(0.1)
                out.write(b'"entries": [], "poked_at": %.6f, "pokes": %d}' % (poked_at, pokes))
        time.sleep(0.02)


if __name__ == "__main__":
    main()
