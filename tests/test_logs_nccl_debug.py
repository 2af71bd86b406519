"""NCCL_DEBUG=INFO/WARN lines: transport errors inside an INFO log, pid->rank attribution."""

from __future__ import annotations

from _logs_helpers import scan, strip_source

from hangscope.sources.logs import scan_log


def test_transport_errors_attributed_through_init_complete() -> None:
    setup = ("runtime_config", "nccl_init_start", "nccl_comm_ready", "nccl_init_timing",
             "nccl_local_peer_closed", "nccl_connected")
    everything = [e for e in scan("nccl_info_with_warn.log") if e.kind not in setup]
    devices = [e for e in everything if e.kind == "nccl_device"]
    events = [e for e in everything if e.kind != "nccl_device"]
    assert [e.kind for e in events] == ["nccl_transport_error"] * 3 + ["cuda_error"]
    ib, ib2, sock, warn = events
    assert (ib.line_no, ib.rank, ib.severity) == (27, 0, "warning")
    assert strip_source(ib.fields) == {
        "host": "node0", "pid": 13571, "tid": 13605, "cuda_dev": 0,
        "src": "transport/net_ib.cc:1295",
        "text": "NET/IB : Got completion from peer 10.0.0.2<53249> with error 12, opcode 32564, "
                "len 0, vendor err 129 (Recv)",
        "transport": "NET/IB", "peer": "10.0.0.2", "peer_port": 53249, "error": 12,
        "vendor_err": 129, "direction": "Recv"}
    assert ib.fields["rank_source"] == "pid"
    # pid 13572 is rank 1 of the 16-rank comm and rank 0 of a 2-rank one: the largest wins
    assert (ib2.rank, ib2.fields["error"], ib2.fields["peer_port"]) == (1, 12, 44206)
    assert (sock.rank, sock.fields["peer"], sock.fields["peer_port"]) == (0, "node2", 42830)
    assert sock.fields["transport"] == "socketProgress"
    assert warn.rank is None and warn.fields["text"] == "Cuda failure 'out of memory'"
    assert warn.fields["error"] == "out of memory"
    # each pid's GPU once, with the rank of its largest communicator; busId 2a000 is 0000:2a:00
    assert {(d.rank, d.fields["pid"], d.fields["cuda_dev"], d.fields["pci"]) for d in devices} >= {
        (0, 13571, 0, "0000:18:00"), (1, 13572, 1, "0000:2a:00")}
    assert len([d for d in devices if d.fields["pid"] == 13572]) == 1


def test_pid_map_applies_to_warn_lines_before_init() -> None:
    data = (b"h:7:9 [0] misc/socket.cc:71 NCCL WARN socketProgress: Connection closed by remote "
            b"peer h2<1>\n"
            b"h:7:8 [0] NCCL INFO comm 0x1 rank 5 nranks 8 cudaDev 0 busId 1000 - Init COMPLETE\n")
    events = scan_log("x.log", data=data)
    assert [(e.kind, e.rank, e.fields["rank_source"]) for e in events] == [
        ("nccl_transport_error", 5, "pid"), ("nccl_device", 5, "pid")]
    assert events[1].fields["pci"] == "0000:01:00"


def test_launcher_tag_prefix() -> None:
    data = b"[3] n:1:2 [1] net.cc:5 NCCL WARN NET/Socket : peer 10.0.0.9<4242> message truncated\n"
    (event,) = scan_log("all.log", data=data)
    assert event.rank == 3 and event.fields["peer"] == "10.0.0.9"


# NCCL's lines with their ``host:pid:tid [dev]`` head left out, as some pastes carry them
BARE_SETUP = """NCCL INFO Bootstrap : Using eth0:10.1.2.3<0>
NCCL INFO NET/Plugin : No plugin found (libnccl-net.so), using internal implementation
transport/ibvwrap.cc:71 NCCL WARN Failed to open libibverbs.so[.1]
NCCL INFO NET/Socket : Using [0]eth0:10.1.2.3<0>
NCCL INFO Using network Socket
NCCL INFO Channel 00/02 :    0   1
NCCL INFO Connected all rings
NCCL INFO Connected all trees
NCCL INFO comm 0x55d0c1a2b3c0 rank 0 nranks 2 cudaDev 0 busId 1a000 - Init COMPLETE
"""


def test_bare_nccl_lines_are_read_like_headed_ones(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from _logs_helpers import findings_of

    from hangscope.analysis.engine import analyze
    from hangscope.options import LoadOptions
    from hangscope.sources.load import load_paths

    # GIVEN a set-up that went through, its lines pasted without NCCL's head
    events = scan_log("bare.log", data=BARE_SETUP.encode())
    kinds = {e.kind for e in events}
    # THEN its WARN, its connection and its ready communicator are read, tied to no process
    assert {"nccl_warn", "nccl_connected", "nccl_init_done"} <= kinds
    done = next(e for e in events if e.kind == "nccl_init_done")
    assert (done.rank, done.fields["rank_source"]) == (0, "content")
    assert all("pid" not in e.fields for e in events)
    path = tmp_path / "bare.log"
    path.write_text(BARE_SETUP)
    verdict, _ = analyze(load_paths([str(path)], LoadOptions())[0])
    assert verdict.status.value == "healthy" and not verdict.findings
    # AND a bare WARN of a failing link is the fault it is
    failing = BARE_SETUP.replace(
        "NCCL INFO Connected all trees",
        "transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer 10.1.2.4<40112> "
        "with error 12, opcode 0, len 0, vendor err 129 (Recv)")
    (warn,) = [e for e in scan_log("f.log", data=failing.encode())
               if e.kind == "nccl_transport_error"]
    assert (warn.fields["peer"], warn.fields["error"]) == ("10.1.2.4", 12)
    assert findings_of(tmp_path, failing)[0].kind.value == "network_fault"
