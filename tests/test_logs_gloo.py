"""gloo errors recorded from real torchrun jobs on this machine (torch 2.13 CPU)."""

from __future__ import annotations

from _logs_helpers import of_kind, scan, strip_source

from hangscope.sources.logs import scan_log


def test_gloo_timeout_recorded() -> None:
    events = scan("recorded_gloo_timeout.log")
    (ev,) = of_kind(events, "gloo_timeout")
    assert (ev.line_no, ev.rank) == (13, 0)
    assert strip_source(ev.fields) == {"timeout_ms": 3000, "op": "recv",
                                       "src": "transport/tcp/unbound_buffer.cc:78", "local_rank": 0}


def test_gloo_connection_closed_recorded() -> None:
    events = scan("recorded_gloo_connection_closed.log")
    (ev,) = of_kind(events, "gloo_connection_closed")
    assert (ev.line_no, ev.rank) == (14, 0)
    assert ev.fields["peer"] == "127.0.0.1" and ev.fields["reason"] == "closed"
    assert ev.fields["src"] == "transport/tcp/pair.cc:553"
    assert isinstance(ev.fields["peer_port"], int)


def test_gloo_read_error_reset_old_path() -> None:
    data = (b"RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Read error "
            b"[127.0.0.1]:62934: Connection reset by peer\n")
    (ev,) = scan_log("rank2.log", data=data)
    assert ev.kind == "gloo_connection_closed" and ev.rank == 2
    assert strip_source(ev.fields) == {"peer": "127.0.0.1", "peer_port": 62934, "reason": "reset",
                                       "src": "transport/tcp/pair.cc:534"}
    assert ev.fields["rank_source"] == "path"


def test_gloo_enforce_size_mismatch_from_recorded_fixture() -> None:
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "fixtures/recorded/size_mismatch/logs/torchrun.log"
    events = scan_log(str(path))
    (ev,) = of_kind(events, "gloo_enforce_fail")
    assert ev.fields["check"] == "op.preamble.length <= op.nbytes. 12 vs 8"
    assert ev.fields["size_mismatch"] == 1 and ev.fields["local_rank"] == 0
