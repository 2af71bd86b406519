"""In-job probe: what only the process knows (its flight-recorder buffer, every thread's stack
and what it waits on, CUDA memory, live DataLoader iterators), answered on request over a Unix
socket, with no change to the training code.

Turn it on with ``HANGSCOPE_PROBE=1`` in the job's environment (the ``hangscope-probe.pth``
start-up hook installed with the package then calls ``install()``), or in code::

    import hangscope.probe
    hangscope.probe.install()

``hangscope attach`` asks every rank whose socket exists (``hangscope.collect.probe``). Stdlib only,
and nothing imported until asked: see ``server`` for what it guarantees the job.
"""

from hangscope.probe.server import install, installed_path, uninstall
from hangscope.probe.wire import socket_dir, socket_path

__all__ = ["install", "installed_path", "socket_dir", "socket_path", "uninstall"]
