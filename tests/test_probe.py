"""The in-job probe in plain Python processes (no torch job): what it answers, what it imports,
the start-up hook, fork, SIGTERM, uid checks, the client and the bundle loader. Every process a
test starts is killed by its process group in ``finally``."""

from __future__ import annotations

import contextlib
import gc
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from probe_env import PTH, REPO, probe_env, sockets_in, wait_sockets

from hangscope.collect import probe as client
from hangscope.discover import RankProcess
from hangscope.model import JobEvidence
from hangscope.probe import wire
from hangscope.sources.registry import FILE_LOADERS

# A program that waits in every way the probe should tell, then prints its pid.
WAITER = """
import queue, threading, time
q = queue.Queue(); rlock = threading.RLock(); event = threading.Event()
def hold():
    with rlock:
        time.sleep(600)
def want():
    with rlock:
        pass
threading.Thread(target=q.get, name="on-queue", daemon=True).start()
threading.Thread(target=event.wait, name="on-event", daemon=True).start()
threading.Thread(target=hold, name="holder", daemon=True).start()
time.sleep(0.2)
threading.Thread(target=want, name="on-rlock", daemon=True).start()
"""


@contextlib.contextmanager
def program(tmp: Path, body: str, *, hook: bool = True,
            env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[str]]:
    """Run ``body`` (after the probe starts through the .pth hook, when ``hook``), then print
    READY and sleep; always killed by process group."""
    script = tmp / "program.py"
    script.write_text(textwrap.dedent(body) + "\nimport sys, time\nprint('READY', flush=True)\n"
                      "time.sleep(600)\n")
    full = {**os.environ, **probe_env(tmp, on=hook), **(env or {})}
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=full, cwd=tmp,
                            start_new_session=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("READY"), line + proc.stderr.read() if proc.stderr else line
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def _ask(tmp: Path, pid: int) -> dict:
    header, _, _ = client.ask(str(tmp / "sockets" / f"{pid}.sock"), timeout_s=10)
    return header


class TestAnswer:
    def test_threads_and_what_they_wait_on(self, tmp_path: Path) -> None:
        # GIVEN a program with threads blocked on a queue, an event and a held RLock
        with program(tmp_path, WAITER) as proc:
            wait_sockets(tmp_path / "sockets", [proc.pid])
            # WHEN the probe is asked
            header = _ask(tmp_path, proc.pid)
        # THEN each thread's wait is named, with the RLock's holder
        by_name = {t["name"]: t for t in header["threads"]}
        assert by_name["on-queue"]["waits_on"]["kind"] == "queue"
        assert by_name["on-event"]["waits_on"]["kind"] == "event"
        rlock = by_name["on-rlock"]["waits_on"]
        assert rlock["kind"] == "rlock" and "holder" in rlock["detail"]
        assert rlock["owner_ident"] == by_name["holder"]["ident"]
        main = by_name["MainThread"]
        assert main["is_main"] and main["frames"][0]["name"] == "<module>"
        # AND the probe's own thread is left out; no torch means no FR, and says so
        assert "hangscope-probe" not in by_name
        assert header["pid"] == proc.pid and header["fr"]["bytes"] == 0
        assert any("no flight-recorder trace" in n for n in header["notes"])
        assert header["cuda"] is None and header["dataloader"] == []

    def test_asked_again_and_again_while_threads_churn_frames(self, tmp_path: Path) -> None:
        # GIVEN threads that enter and leave generators and context managers without pause
        # (frames go stale fastest there: a torn walk once read an int as a frame's code)
        churn = """
            import contextlib, threading
            @contextlib.contextmanager
            def scope(i):
                yield sum(j for j in range(i % 7))
            def batches(n):
                for i in range(n):
                    with scope(i) as v:
                        yield v
            def spin():
                while True:
                    for _ in batches(50):
                        pass
            for name in ("churn-a", "churn-b"):
                threading.Thread(target=spin, name=name, daemon=True).start()
            """
        with program(tmp_path, churn) as proc:
            wait_sockets(tmp_path / "sockets", [proc.pid])
            # WHEN the probe is asked 200 times
            answers = [_ask(tmp_path, proc.pid) for _ in range(200)]
        # THEN every answer holds both threads, each frame a name, a file and a line or None
        for header in answers:
            by_name = {t["name"]: t for t in header["threads"]}
            assert {"churn-a", "churn-b", "MainThread"} <= set(by_name), header["notes"]
            frames = [f for t in header["threads"] for f in t["frames"]]
            assert all(isinstance(f["name"], str) and isinstance(f["filename"], str)
                       and (f["line"] is None or isinstance(f["line"], int)) for f in frames)
            assert by_name["churn-a"]["frames"][-1]["name"] in ("Thread._bootstrap", "_bootstrap")

    def test_answer_leaves_switch_interval_and_collector_as_found(self) -> None:
        # GIVEN a program that set its own switch interval and turned the collector off
        from hangscope.probe import answer
        interval, collecting = sys.getswitchinterval(), gc.isenabled()
        try:
            for program_gc in (False, True):
                sys.setswitchinterval(0.002)
                (gc.enable if program_gc else gc.disable)()
                # WHEN the probe answers
                header, _ = answer.build(wire.WANT_ALL, None, 0.0, wire.MAX_FR)
                # THEN both are as the program left them, and the walk saw this thread
                assert sys.getswitchinterval() == pytest.approx(0.002)
                assert gc.isenabled() is program_gc
                assert any(t["is_main"] for t in header["threads"])
        finally:
            sys.setswitchinterval(interval)
            (gc.enable if collecting else gc.disable)()

    def test_walk_runs_no_code_of_the_programs_classes(self) -> None:
        # GIVEN threads blocked on a held lock inside methods of classes that run code when their
        # attributes are read: one overrides __getattribute__, one makes __dict__ a property
        from hangscope.probe import answer
        ran: list[str] = []
        walking = threading.Event()  # set while the probe walks: only then is a read the walk's
        held, release = threading.Lock(), threading.Event()

        class Guarded:
            def __init__(self, lock: threading.Lock) -> None:
                self.lock = lock

            def __getattribute__(self, name: str) -> object:
                if walking.is_set() and threading.current_thread() is threading.main_thread():
                    ran.append(f"Guarded.{name}")
                return object.__getattribute__(self, name)

            def wait(self) -> None:
                lock = object.__getattribute__(self, "lock")
                with lock:
                    pass

        class Proxied:
            def __init__(self, lock: threading.Lock) -> None:
                self.lock = lock

            @property  # type: ignore[misc]
            def __dict__(self) -> dict[str, object]:
                if walking.is_set():
                    ran.append("Proxied.__dict__")
                return {}

            def wait(self) -> None:
                with self.lock:
                    pass

        def hold() -> None:
            with held:
                release.wait()

        threads = [threading.Thread(target=hold, name="holder"),
                   threading.Thread(target=Guarded(held).wait, name="guarded"),
                   threading.Thread(target=Proxied(held).wait, name="proxied")]
        threads[0].start()
        while not held.locked():
            time.sleep(0.01)
        for thread in threads[1:]:
            thread.start()
        try:
            time.sleep(0.2)
            # WHEN the probe answers (walking their frames from this thread)
            walking.set()
            header, _ = answer.build(wire.WANT_ALL, None, 0.0, wire.MAX_FR)
        finally:
            walking.clear()
            release.set()
            for thread in threads:
                thread.join(5)
        # THEN none of their attribute code ran, and the wait whose lock is in the frame's own
        # locals is still named (the proxied one's lock sits where only its class's code could
        # read it: not named, rather than run that code)
        assert ran == []
        by_name = {t["name"]: t for t in header["threads"]}
        assert by_name["guarded"]["waits_on"]["kind"] == "lock"

    def test_imports_nothing_heavy_to_start_or_to_answer(self, tmp_path: Path) -> None:
        body = """
        import json, sys
        before = set(sys.modules)
        import hangscope.probe
        hangscope.probe.install()
        with open("modules.json", "w") as out:
            json.dump(sorted(set(sys.modules) - before), out)
        """
        # GIVEN a program that starts the probe itself
        with program(tmp_path, body, hook=False) as proc:
            wait_sockets(tmp_path / "sockets", [proc.pid])
            # WHEN it is asked
            _ask(tmp_path, proc.pid)
            maps = Path(f"/proc/{proc.pid}/maps").read_text()
        # THEN starting loaded only small stdlib modules and hangscope's own, and neither
        # starting nor answering loaded torch or ctypes
        started = json.loads((tmp_path / "modules.json").read_text())
        # (what is new depends on what site already loaded: little on Debian's python3 in a
        # venv, typing and collections on pyenv's)
        foreign = {m.split(".")[0] for m in started} - {
            "hangscope", "select", "socket", "selectors", "collections", "array", "_socket",
            "math"}
        assert foreign <= {"atexit", "struct", "_struct", "threading", "_weakrefset", "signal",
                           "stat", "enum"}
        assert "libtorch" not in maps and "_ctypes" not in maps


class TestStartupHook:
    def test_hook_does_nothing_without_the_variable(self, tmp_path: Path) -> None:
        body = "import sys; assert not any(m.startswith('hangscope') for m in sys.modules)"
        with program(tmp_path, body, hook=False):
            assert sockets_in(tmp_path / "sockets") == []

    def test_hook_starts_the_probe(self, tmp_path: Path) -> None:
        body = "import hangscope.probe, os; assert hangscope.probe.installed_path()"
        with program(tmp_path, body) as proc:
            assert sockets_in(tmp_path / "sockets") == [f"{proc.pid}.sock"]
            st = os.stat(tmp_path / "sockets" / f"{proc.pid}.sock")
            assert st.st_mode & 0o777 == 0o600
            assert os.stat(tmp_path / "sockets").st_mode & 0o777 == 0o700


class TestLifecycle:
    def test_forked_child_has_no_probe_and_keeps_the_parents(self, tmp_path: Path) -> None:
        body = """
        import os, hangscope.probe as p
        pid = os.fork()
        if pid == 0:
            os._exit(0 if p.installed_path() is None else 3)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert os.path.exists(p.installed_path())
        """
        with program(tmp_path, body) as proc:
            assert sockets_in(tmp_path / "sockets") == [f"{proc.pid}.sock"]
            assert _ask(tmp_path, proc.pid)["pid"] == proc.pid

    def test_default_sigterm_removes_the_socket_and_kills(self, tmp_path: Path) -> None:
        with program(tmp_path, "") as proc:
            os.kill(proc.pid, signal.SIGTERM)
            assert proc.wait(timeout=10) == -signal.SIGTERM
        assert sockets_in(tmp_path / "sockets") == []

    def test_programs_own_sigterm_handler_still_runs(self, tmp_path: Path) -> None:
        body = """
        import signal, sys
        def stop(signum, frame):
            print("handled", flush=True)
            sys.exit(7)
        signal.signal(signal.SIGTERM, stop)
        """
        with program(tmp_path, body) as proc:
            os.kill(proc.pid, signal.SIGTERM)
            assert proc.wait(timeout=10) == 7
            assert proc.stdout is not None and "handled" in proc.stdout.read()
        assert sockets_in(tmp_path / "sockets") == []  # atexit

    def test_stale_socket_of_a_dead_process_is_swept(self, tmp_path: Path) -> None:
        (tmp_path / "sockets").mkdir(mode=0o700)
        dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                              capture_output=True, text=True, check=True).stdout.strip()
        (tmp_path / "sockets" / f"{dead}.sock").touch()
        with program(tmp_path, "") as proc:
            assert sockets_in(tmp_path / "sockets") == [f"{proc.pid}.sock"]


class TestAccess:
    def test_bad_request_is_dropped_and_the_probe_answers_the_next(self, tmp_path: Path) -> None:
        with program(tmp_path, "") as proc:
            path = str(tmp_path / "sockets" / f"{proc.pid}.sock")
            with socket.socket(socket.AF_UNIX) as sock:
                sock.connect(path)
                sock.sendall(b"\xff\xff\xff\xff")  # a 4 GiB request
                assert sock.recv(16) == b""
            assert _ask(tmp_path, proc.pid)["pid"] == proc.pid

    @pytest.mark.skipif(os.geteuid() != 0 or shutil.which("useradd") is None,
                        reason="needs root and useradd to create a second user")
    def test_other_uid_is_refused(self, tmp_path: Path) -> None:
        user = f"hsprobe{os.getpid() % 100000}"
        subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", user],
                       check=True, capture_output=True)
        open_parent = Path(tempfile.mkdtemp(prefix="hangscope-probe-test-"))  # pytest's is 0700
        os.chmod(open_parent, 0o755)
        sockets = open_parent / "sockets"
        try:
            uid = pwd.getpwnam(user).pw_uid
            with program(tmp_path, "", env={wire.ENV_DIR: str(sockets)}) as proc:
                wait_sockets(sockets, [proc.pid])
                path = sockets / f"{proc.pid}.sock"
                # GIVEN the folder and socket as the probe made them: the other user cannot
                # even reach the socket
                assert _as_user(uid, str(path)).startswith("PermissionError")
                # WHEN both are opened up by mistake, SO_PEERCRED still refuses the peer
                os.chmod(sockets, 0o755)
                os.chmod(path, 0o666)
                assert _as_user(uid, str(path)) == "refused"
                header, _, _ = client.ask(str(path), timeout_s=10)  # root still may
                assert header["pid"] == proc.pid
            assert proc.stderr is not None
            assert f"refused a connection from uid {uid}" in proc.stderr.read()
        finally:
            subprocess.run(["userdel", user], capture_output=True)
            shutil.rmtree(open_parent, ignore_errors=True)


def _as_user(uid: int, path: str) -> str:
    """Connect and ask from a child running as ``uid``; what happened, in words."""
    code = textwrap.dedent(f"""
        import os, socket, struct, sys
        os.setgid({uid}); os.setuid({uid})
        try:
            s = socket.socket(socket.AF_UNIX); s.settimeout(5); s.connect({path!r})
            body = b'{{"protocol": 1}}'
            s.sendall(struct.pack(">I", len(body)) + body)
            print("refused" if s.recv(4) == b"" else "answered")
        except (BrokenPipeError, ConnectionResetError):
            print("refused")  # closed before or while the request was sent
        except OSError as exc:
            print(type(exc).__name__)
        """)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=30, cwd="/")
    return (run.stdout or run.stderr).strip()


class TestClient:
    def _rank(self, pid: int, tmp: Path) -> RankProcess:
        return RankProcess(pid=pid, rank=0, local_rank=0, world_size=1, local_world_size=1,
                           group_rank=0, run_id=None, master_addr=None, master_port=None,
                           env={wire.ENV_DIR: str(tmp / "sockets")}, cmdline=[], workers=[],
                           create_time=0.0)

    def test_no_socket_is_no_probe(self, tmp_path: Path) -> None:
        assert client.collect(self._rank(os.getpid(), tmp_path)) is None

    def test_a_socket_that_never_answers_is_a_gap(self, tmp_path: Path) -> None:
        (tmp_path / "sockets").mkdir()
        with socket.socket(socket.AF_UNIX) as mute:
            mute.bind(str(tmp_path / "sockets" / f"{os.getpid()}.sock"))
            mute.listen(1)
            got = client.collect(self._rank(os.getpid(), tmp_path), timeout_s=0.5)
        assert got is not None and not got.answered
        assert "did not answer" in got.note

    def test_answer_becomes_a_record_the_loader_reads(self, tmp_path: Path) -> None:
        with program(tmp_path, WAITER) as proc:
            wait_sockets(tmp_path / "sockets", [proc.pid])
            got = client.collect(self._rank(proc.pid, tmp_path))
        assert got is not None and got.answered and got.fr == b""
        record = tmp_path / "bundle" / "probe.json"
        record.parent.mkdir()
        record.write_bytes(got.record)
        evidence, problems = JobEvidence(), []
        FILE_LOADERS["probe"](str(record), 0, evidence, problems)
        (sample,) = evidence.rank(0).samples
        assert sample.source == "probe" and sample.pid == proc.pid
        assert any(t.is_main for t in sample.threads)
        assert any("no flight-recorder trace" in p for p in problems)


class TestLoader:
    def _record(self, tmp: Path, answer: object) -> Path:
        path = tmp / "ranks" / "1" / "probe.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps({"rank": 1, "pid": 42, "answer": answer}))
        return path

    def test_stacks_are_not_added_beside_py_spy_stacks(self, tmp_path: Path) -> None:
        answer = {"pid": 42, "time": {"wall": 5.0}, "notes": [], "threads": [
            {"ident": 1, "native_id": 42, "name": "MainThread",
             "frames": [{"name": "f", "filename": "a.py", "line": 3}]}],
            "dataloader": [{"worker_pids": [43, 44]}]}
        path = self._record(tmp_path, answer)
        (path.parent / "stacks-42-0.json").write_text("{}")
        evidence, problems = JobEvidence(), []
        FILE_LOADERS["probe"](str(path), 1, evidence, problems)
        assert evidence.rank(1).samples == [] and evidence.rank(1).worker_pids == [43, 44]
        assert problems == []

    @pytest.mark.parametrize("content", ["not json", "[]", '{"rank": 1}'],
                             ids=["garbage", "list", "no-answer"])
    def test_bad_record_is_one_line_naming_the_file(self, tmp_path: Path, content: str) -> None:
        path = tmp_path / "probe.json"
        path.write_text(content)
        problems: list[str] = []
        FILE_LOADERS["probe"](str(path), 1, JobEvidence(), problems)
        assert len(problems) == 1 and problems[0].startswith(str(path)) and "\n" not in problems[0]


@pytest.mark.parametrize("build", ["wheel", "editable"])
def test_builds_put_the_hook_at_the_root_of_site_packages(tmp_path: Path, build: str) -> None:
    """setup.py's build_py: the .pth must land at the wheel's root, which pip installs into
    site-packages (where ``site`` runs it), for a wheel and for ``pip install -e``."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(REPO / name, src)
    shutil.copytree(REPO / "hangscope", src / "hangscope",
                    ignore=shutil.ignore_patterns("__pycache__"))
    hook = "build_wheel" if build == "wheel" else "build_editable"
    code = (f"from setuptools import build_meta as b; print(b.{hook}({str(tmp_path / 'out')!r}))")
    (tmp_path / "out").mkdir()
    run = subprocess.run([sys.executable, "-c", code], cwd=src, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    wheel = tmp_path / "out" / run.stdout.strip().splitlines()[-1]
    with zipfile.ZipFile(wheel) as archive:
        assert archive.read("hangscope-probe.pth") == PTH.read_bytes()
