"""Querying NCCL's RAS service during attach (hangscope.collect.nccl_ras).

NCCL cannot run on this machine (no GPU), so the RAS service is a fake: ``FakeRas`` below is built
from NCCL's source, not recorded. It answers the way ``rasClientEventLoop`` in
``src/ras/client_support.cc`` does (case-insensitive command lines, ``SERVER PROTOCOL 2``, ``OK`` to
``TIMEOUT``/``SET FORMAT``, ``ERROR: Unknown command ...`` otherwise, the report then EOF after
``STATUS``), and its text report is the banner ``rasClientRunInit`` prints followed by
``fixtures/logs/ras_report.txt`` (itself written from ``client_support.cc``, see
fixtures/logs/README.md).
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from hangscope.bundle import BundleWriter
from hangscope.collect import attach, nccl_ras
from hangscope.collect.budget import Budget
from hangscope.discover import JobProcesses, RankProcess
from hangscope.options import AttachOptions, LoadOptions
from hangscope.sources.load import load_paths

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "logs"
BANNER = (b"NCCL version 2.24.3 compiled with CUDA 12.6\n"
          b"CUDA runtime version 12060, driver version 12080\n\n")
TEXT_REPORT = BANNER + (FIXTURES / "ras_report.txt").read_bytes()
JSON_REPORT = (FIXTURES / "ras_report.json").read_bytes()
GENEROUS_S = 20.0  # upper bound for anything that must be cut off by a 1-2 s timeout


class FakeRas:
    """A RAS client listener on a free localhost port, served by one thread.

    ``mode``: "real" (the protocol above; ``json`` toggles NCCL >= 2.28 SET FORMAT support),
    "silent" (accepts, never answers), "flood" (handshake, then endless report bytes),
    "drip" (handshake, then one byte every 50 ms), "http" (answers like a web server).
    """

    def __init__(self, mode: str = "real", json: bool = True) -> None:
        self.mode, self.json = mode, json
        self.commands: list[str] = []
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(4)
        self.listener.settimeout(0.05)
        self.port: int = self.listener.getsockname()[1]
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, name="fake-ras", daemon=True)

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except (TimeoutError, OSError):
                continue
            with conn:
                conn.settimeout(0.05)
                try:
                    self._session(conn)
                except OSError:
                    pass  # the client went away: that is its right

    def _lines(self, conn: socket.socket) -> Iterator[str]:
        buf = b""
        while not self.stop.is_set():
            while b"\n" in buf:
                line, _, buf = buf.partition(b"\n")
                yield line.rstrip(b"\r").decode("ascii", "replace")
            try:
                piece = conn.recv(1024)
            except TimeoutError:
                continue
            if not piece:
                return
            buf += piece

    def _session(self, conn: socket.socket) -> None:
        if self.mode == "silent":
            for _ in self._lines(conn):
                pass  # read and never answer
            return
        fmt = "text"
        for cmd in self._lines(conn):
            self.commands.append(cmd)
            low = cmd.lower()
            if self.mode == "http":
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
                return
            if low.startswith("client protocol "):
                conn.sendall(b"SERVER PROTOCOL 2\n")
            elif low.startswith("timeout "):
                conn.sendall(b"OK\n")
            elif low.startswith("set format ") and self.json:
                fmt = low.removeprefix("set format ")
                conn.sendall(b"OK\n" if fmt in ("text", "json") else b"ERROR: Invalid format\n")
            elif low in ("status", "verbose status"):
                self._report(conn, fmt)
                return
            else:
                conn.sendall(f"ERROR: Unknown command {cmd}\n".encode())

    def _report(self, conn: socket.socket, fmt: str) -> None:
        if self.mode == "real":
            conn.sendall(JSON_REPORT if fmt == "json" else TEXT_REPORT)
            return
        chunk, pause = (b"x" * 65536, 0.0) if self.mode == "flood" else (b"y", 0.05)
        while not self.stop.is_set():
            try:
                conn.sendall(chunk)
            except TimeoutError:
                continue
            time.sleep(pause)

    def __enter__(self) -> FakeRas:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=GENEROUS_S)
        self.listener.close()
        assert not self.thread.is_alive()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def job_of(env: dict[str, str], pid: int | None = None) -> JobProcesses:
    """One rank: this test process, which owns FakeRas's listening socket like a rank would."""
    rank = RankProcess(pid=pid or os.getpid(), rank=0, local_rank=0, world_size=2,
                       local_world_size=2, group_rank=0, run_id="r", master_addr=None,
                       master_port=None, env=env, cmdline=["python"], workers=[],
                       create_time=0.0)
    return JobProcesses(launchers=[], ranks=[rank], searched="test", host="node1")


@contextmanager
def timed() -> Iterator[list[float]]:
    box: list[float] = []
    started = time.monotonic()
    try:
        yield box
    finally:
        box.append(time.monotonic() - started)


class TestQuery:
    def test_real_protocol_gets_the_text_report(self) -> None:
        with FakeRas() as server:
            result = nccl_ras.query("127.0.0.1", server.port, timeout_s=5.0)
        assert result.status == "ok", result.detail
        assert result.data == TEXT_REPORT
        assert result.server_protocol == 2 and result.fmt == "text"
        assert server.commands == ["CLIENT PROTOCOL 2", "TIMEOUT 2", "STATUS"]

    def test_json_when_the_server_has_it(self) -> None:
        with FakeRas(json=True) as server:
            result = nccl_ras.query("127.0.0.1", server.port, timeout_s=5.0, fmt="json")
        assert (result.status, result.fmt, result.data) == ("ok", "json", JSON_REPORT)
        assert result.bundle_name() == "nccl_ras.json"
        assert "SET FORMAT json" in server.commands

    def test_json_falls_back_to_text_on_older_nccl(self) -> None:
        with FakeRas(json=False) as server:
            result = nccl_ras.query("127.0.0.1", server.port, timeout_s=5.0, fmt="json")
        assert (result.status, result.fmt, result.data) == ("ok", "text", TEXT_REPORT)
        assert "text instead" in result.detail

    def test_refused_is_one_quick_line(self) -> None:
        with timed() as took:
            result = nccl_ras.query("127.0.0.1", free_port(), timeout_s=2.0)
        assert result.status == "failed" and result.data == b""
        assert "connection refused" in result.detail and "\n" not in result.detail
        assert took[0] < GENEROUS_S

    def test_silent_server_is_cut_off_by_the_deadline(self) -> None:
        with FakeRas("silent") as server, timed() as took:
            result = nccl_ras.query("127.0.0.1", server.port, timeout_s=1.0)
        assert result.status == "timeout" and result.data == b""
        assert took[0] < GENEROUS_S

    def test_dripping_server_is_cut_off_and_the_partial_report_kept(self) -> None:
        with FakeRas("drip") as server, timed() as took:
            result = nccl_ras.query("127.0.0.1", server.port, timeout_s=1.0)
        assert result.status == "timeout"
        assert result.data and set(result.data) == {ord("y")}
        assert took[0] < GENEROUS_S

    def test_flood_is_bounded(self) -> None:
        with FakeRas("flood") as server:
            result = nccl_ras.query("127.0.0.1", server.port, timeout_s=GENEROUS_S,
                                    max_bytes=200_000)
        assert result.status == "ok" and result.truncated
        assert len(result.data) == 200_000
        assert "cut at 200000 bytes" in result.detail

    def test_something_else_on_the_port_is_not_trusted(self) -> None:
        with FakeRas("http") as server:
            result = nccl_ras.query("127.0.0.1", server.port, timeout_s=5.0)
        assert result.status == "failed" and result.data == b""
        assert result.detail.startswith("not an NCCL RAS service: handshake answered 'HTTP/1.1")


class TestPlan:
    def test_listener_owned_by_a_rank_is_probed_at_its_address(self) -> None:
        with FakeRas() as server:
            plan = nccl_ras.plan(job_of({"NCCL_RAS_ADDR": f"localhost:{server.port}"}))
        assert (plan.host, plan.port) == ("127.0.0.1", server.port)
        assert plan.reason == f"rank 0 (pid {os.getpid()}) listens on port {server.port}"

    def test_gloo_job_is_not_probed_and_no_gap(self) -> None:
        # No NCCL_* in the environment, default address: whatever holds port 28028 here (usually
        # nothing) is not this test process's, so there is nothing to ask and nothing missing.
        result = nccl_ras.collect(job_of({"RANK": "0", "WORLD_SIZE": "2",
                                          "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000"}))
        assert result.status == "skipped" and result.data == b""
        assert ("nothing listens on port 28028" in result.detail
                or "outside this job" in result.detail)
        assert result.gap is None

    def test_nccl_job_without_listener_is_a_gap(self) -> None:
        port = free_port()
        result = nccl_ras.collect(job_of({"NCCL_RAS_ADDR": f"127.0.0.1:{port}",
                                          "NCCL_DEBUG": "WARN"}))
        assert result.status == "skipped"
        assert result.gap is not None and result.gap.startswith("no NCCL RAS report: nothing")

    def test_listener_of_another_process_is_left_alone(self) -> None:
        with FakeRas() as server:
            result = nccl_ras.collect(job_of({"NCCL_RAS_ADDR": f"127.0.0.1:{server.port}"},
                                             pid=os.getppid()))
        assert result.status == "skipped" and server.commands == []
        assert "held by a process outside this job" in result.detail

    @pytest.mark.parametrize("value", ["0", " 0 ", "00", "2"])
    def test_ras_disabled(self, value: str) -> None:
        plan = nccl_ras.plan(job_of({"NCCL_RAS_ENABLE": value}))
        assert plan.host is None and "NCCL_RAS_ENABLE is not 1" in plan.reason

    @pytest.mark.parametrize("value", ["1", " 1", "0x1", "", "yes"])
    def test_ras_enabled(self, value: str) -> None:
        with FakeRas() as server:
            plan = nccl_ras.plan(job_of({"NCCL_RAS_ENABLE": value,
                                         "NCCL_RAS_ADDR": f"127.0.0.1:{server.port}"}))
        assert plan.host == "127.0.0.1"

    @pytest.mark.parametrize(("value", "parsed"), [
        ("localhost:28028", ("localhost", 28028)), ("10.0.0.1:1234", ("10.0.0.1", 1234)),
        ("[::1]:28028", ("::1", 28028)), ("localhost", None), ("host:0", None),
        ("host:99999", None), ("[::1]28028", None), (":28028", None), ("[::1", None)])
    def test_parse_addr(self, value: str, parsed: tuple[str, int] | None) -> None:
        assert nccl_ras.parse_addr(value) == parsed

    def test_bad_addr_is_a_gap(self) -> None:
        result = nccl_ras.collect(job_of({"NCCL_RAS_ADDR": "no-port-here\x1b[31m"}))
        assert result.status == "skipped" and result.gap is not None
        assert "\x1b" not in result.gap


class TestListeners:
    @pytest.mark.parametrize(("bind", "connect"), [("127.0.0.1", "127.0.0.1"),
                                                   ("0.0.0.0", "127.0.0.1"),
                                                   ("::1", "::1"), ("::", "::1")])
    def test_listener_found_in_proc(self, bind: str, connect: str) -> None:
        family = socket.AF_INET6 if ":" in bind else socket.AF_INET
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            pytest.skip(f"no {family.name} sockets here")
        with sock:
            try:
                sock.bind((bind, 0))
            except OSError:
                pytest.skip(f"cannot bind {bind} here")
            sock.listen(1)
            port = sock.getsockname()[1]
            found = nccl_ras.listening_sockets(os.getpid(), port)
            assert found is not None
            assert [address for address, _ in found] == [connect]
            inode = os.fstat(sock.fileno()).st_ino
            assert [i for _, i in found] == [inode]
        assert nccl_ras.listening_sockets(os.getpid(), port) == []

    def test_without_proc_the_environment_decides(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(nccl_ras, "listening_sockets", lambda pid, port: None)
        assert nccl_ras.plan(job_of({})).reason == "no sign of NCCL in the ranks' environment"
        plan = nccl_ras.plan(job_of({"NCCL_DEBUG": "INFO"}))
        assert (plan.host, plan.port) == ("127.0.0.1", 28028)
        plan = nccl_ras.plan(job_of({"NCCL_RAS_ADDR": "node7.example:28028"}))
        assert plan.host is None and plan.expected and "not resolved" in plan.reason

    def test_rank_in_another_network_namespace(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(nccl_ras, "_other_netns", lambda pid: True)
        result = nccl_ras.collect(job_of({"NCCL_DEBUG": "WARN"}))
        assert result.status == "skipped" and "another network namespace" in result.detail
        assert result.gap is not None


class TestAttachHook:
    def _collect(self, tmp_path: Path, env: dict[str, str],
                 options: AttachOptions) -> tuple[attach.CollectSummary, str]:
        job = job_of(env)
        bundle = str(tmp_path / "bundle")
        writer = BundleWriter(bundle)
        summary = attach.CollectSummary(job=job, bundle_dir=bundle)
        attach._collect_ras(job, writer, summary, options, Budget())
        writer.gaps.extend(summary.gaps)
        writer.close()
        return summary, bundle

    def test_report_reaches_the_evidence_through_the_bundle(self, tmp_path: Path) -> None:
        with FakeRas() as server:
            summary, bundle = self._collect(
                tmp_path, {"NCCL_RAS_ADDR": f"localhost:{server.port}"}, AttachOptions())
        assert summary.ok == {"nccl_ras": [-1]} and summary.gaps == []
        assert (Path(bundle) / "job" / "nccl_ras.txt").read_bytes() == TEXT_REPORT
        evidence, _ = load_paths([bundle], LoadOptions())
        ras = [e for e in evidence.unattributed_logs if e.kind == "nccl_ras"]
        assert [(e.fields["comm"], e.fields["state"], e.fields["ranks"]) for e in ras] == [
            ("job", "DEAD", ""), ("9e6f2a1c3b5d7f80", "INCOMPLETE", "6"),
            ("9e6f2a1c3b5d7f80", "MISMATCH", "5")]
        assert ras[2].fields["op_counts"] == "5:1044" and ras[0].fields["pids"] == "8813"

    def test_refused_probe_is_one_gap_line(self, tmp_path: Path) -> None:
        with FakeRas("http") as server:
            summary, bundle = self._collect(
                tmp_path, {"NCCL_RAS_ADDR": f"127.0.0.1:{server.port}"}, AttachOptions())
        assert len(summary.gaps) == 1 and "not an NCCL RAS service" in summary.gaps[0]
        assert not (Path(bundle) / "job").exists()

    def test_opt_out(self, tmp_path: Path) -> None:
        with FakeRas() as server:
            summary, _ = self._collect(tmp_path, {"NCCL_RAS_ADDR": f"127.0.0.1:{server.port}"},
                                       AttachOptions(query_ras=False))
        assert server.commands == [] and summary.ok == {} and summary.gaps == []
