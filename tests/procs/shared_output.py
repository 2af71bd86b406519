"""A launcher that starts two 'ranks' whose stdout and stderr all go to one file it opened (as a
job script run as ``python job.py > job.log`` passes its own output on), then writes READY.

    python shared_output.py READY LOGFILE
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

RANK_CODE = r"""
import os, sys, time
os.write(1, f"rank {os.environ['RANK']} up\n".encode())  # one write: lines never interleave
time.sleep(600)
"""


def main(ready: str, log: str) -> None:
    with open(log, "ab") as shared:
        ranks = [subprocess.Popen([sys.executable, "-c", RANK_CODE], stdout=shared,
                                  stderr=shared,
                                  env=dict(os.environ, RANK=str(rank), WORLD_SIZE="2",
                                           LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE="2"))
                 for rank in range(2)]
    while open(log, "rb").read().count(b" up\n") < 2:
        time.sleep(0.05)
    with open(ready + ".tmp", "w") as out:
        json.dump({"launcher": os.getpid(), "children": [r.pid for r in ranks]}, out)
    os.replace(ready + ".tmp", ready)
    time.sleep(600)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
