"""Imported by ``hangscope-probe.pth`` at interpreter start-up, only when HANGSCOPE_PROBE=1."""

try:
    from hangscope.probe.server import install

    install()
except Exception as exc:  # noqa: BLE001 - never break the interpreter's start-up
    import sys

    sys.stderr.write(f"hangscope probe: not started: {type(exc).__name__}: {exc}\n")
