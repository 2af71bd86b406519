"""DataLoader failures: worker SIGKILLed and timeout (recorded), shm bus error (written)."""

from __future__ import annotations

from _logs_helpers import of_kind, scan, strip_source


def test_worker_killed_recorded() -> None:
    (ev,) = of_kind(scan("recorded_dataloader_worker_killed.log"), "dataloader_worker_killed")
    assert ev.line_no == 60 and ev.rank is None and ev.fields["local_rank"] == 0
    assert ev.fields["signal"] == "Killed" and ev.fields["pids"] == str(ev.fields["pid"])


def test_timeout_recorded() -> None:
    (ev,) = of_kind(scan("recorded_dataloader_timeout.log"), "dataloader_timeout")
    assert ev.line_no == 18 and strip_source(ev.fields) == {"timeout_s": 2.0, "local_rank": 0}


def test_shm_bus_error_and_exited_unexpectedly() -> None:
    events = scan("dataloader_shm_bus_error.log")
    assert [(e.kind, e.line_no) for e in events] == [
        ("shm_bus_error", 1), ("traceback", 2), ("dataloader_worker_killed", 7),
        ("dataloader_worker_killed", 16)]
    assert events[0].fields == {"shm_hint": 1}
    assert events[2].fields == {"pid": 2280, "pids": "2280", "signal": "Bus error", "shm": 1}
    assert events[3].fields == {"pid": 2280, "pids": "2280,2281", "signal": ""}
    assert events[1].fields["chained"] == 1
