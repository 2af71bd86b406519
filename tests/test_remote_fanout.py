"""``--ssh`` and ``--k8s-pods``/``--k8s-selector`` fan-out, without a real cluster.

Fake ``ssh`` and ``kubectl`` executables, first on the PATH, stand in for the clients: each
"host" (or pod) is a folder under ``FAKE_ROOT/hosts``, and the fake runs the remote command here
with ``sh -c`` (as a login shell would), or hangs, or prints a prepared tar, as the host's
``mode`` file says. A host that does not exist fails as ssh/kubectl do. On a real cluster each
host sees only its own ranks; here all run on one machine, so the remote ``python3`` (a shim,
first on the PATH) turns the job selector it is given into ``--pid`` of the host's own ranks and
logs the arguments it got, so that the tests can check what the fan-out sent.

The live tests share one hung 4-rank missing_rank job (culprit rank 2), killed by its process
groups when the module ends. Every process a hangscope run starts inherits a marker in its
environment; after each test none may be left (checked by pid), and any found is killed.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from hangscope.bundle import MANIFEST
from hangscope.cli import main
from hangscope.cluster import remote
from hangscope.cluster.remote import UnsafeBundle, unpack_bundle
from hangscope.errors import ExitCode

from fixtures.jobrunner import SCENARIOS, Job, running_job

REPO = Path(__file__).resolve().parent.parent
MARK = "HANGSCOPE_REMOTE_TEST_MARK"

FAKE_SSH = r"""#!/bin/sh
# fake ssh: skip options, take the host, run the command string with sh -c (a login shell would)
while [ $# -gt 0 ]; do
  case "$1" in
    -o|-p|-i|-l|-F|-J) shift 2 ;;
    -*) shift ;;
    *) break ;;
  esac
done
host=$1; shift
printf 'ssh %s\n' "$host" >> "$FAKE_ROOT/calls.log"
if [ ! -d "$FAKE_ROOT/hosts/$host" ]; then
  echo "ssh: Could not resolve hostname $host: Name or service not known" >&2
  exit 255
fi
FAKE_HOST=$host; export FAKE_HOST
case "$(cat "$FAKE_ROOT/hosts/$host/mode")" in
  hang) exec sleep 300 ;;
  tar) exec cat "$FAKE_ROOT/hosts/$host/stdout.tar" ;;
esac
exec sh -c "$*"
"""

FAKE_KUBECTL = r"""#!/bin/sh
# fake kubectl: 'get pods' lists FAKE_ROOT/pods; 'exec POD ... -- CMD...' runs CMD here
verb=$1; shift
if [ "$verb" = get ]; then
  printf 'kubectl get %s\n' "$*" >> "$FAKE_ROOT/calls.log"
  cat "$FAKE_ROOT/pods"
  exit 0
fi
pod=$1; shift
scope=""
while [ $# -gt 0 ] && [ "$1" != "--" ]; do scope="$scope $1"; shift; done
shift
printf 'kubectl exec %s%s\n' "$pod" "$scope" >> "$FAKE_ROOT/calls.log"
if [ ! -d "$FAKE_ROOT/hosts/$pod" ]; then
  echo "Error from server (NotFound): pods \"$pod\" not found" >&2
  exit 1
fi
FAKE_HOST=$pod; export FAKE_HOST
case "$(cat "$FAKE_ROOT/hosts/$pod/mode")" in
  hang) exec sleep 300 ;;
esac
exec "$@"
"""

PYTHON_SHIM = """#!{python}
# the remote python3 of a fake host: the job selector becomes --pid of this host's ranks
import json, os, sys
root, host = os.environ["FAKE_ROOT"], os.environ["FAKE_HOST"]
args = sys.argv[1:]
with open(os.path.join(root, "calls.log"), "a") as log:
    log.write("python3 " + host + " " + json.dumps(args) + "\\n")
kept, skip = [], False
for arg in args:
    if skip:
        skip = False
    elif arg in ("--pid", "--pid-group", "--match"):
        skip = True
    else:
        kept.append(arg)
with open(os.path.join(root, "hosts", host, "pids")) as f:
    pids = [a for pid in f.read().split() for a in ("--pid", pid)]
os.execv(sys.executable, [sys.executable, *kept, *pids])
"""


class Fakes:
    """The fake clients and hosts of one test, and the environment to run hangscope in."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.mark = uuid.uuid4().hex
        bin_dir = root / "bin"
        bin_dir.mkdir(parents=True)
        for name, text in (("ssh", FAKE_SSH), ("kubectl", FAKE_KUBECTL),
                           ("python3", PYTHON_SHIM.format(python=sys.executable))):
            (bin_dir / name).write_text(text)
            (bin_dir / name).chmod(0o755)
        (root / "hosts").mkdir()
        (root / "calls.log").write_text("")
        self.tmp = root / "tmp"  # the hosts' TMPDIR, where the remote script works
        self.tmp.mkdir()
        self.env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
                    "FAKE_ROOT": str(root), "PYTHONPATH": str(REPO), "TMPDIR": str(self.tmp),
                    MARK: self.mark}

    def host(self, name: str, mode: str = "run", pids: list[int] | None = None,
             tar: bytes = b"") -> None:
        folder = self.root / "hosts" / name
        folder.mkdir()
        (folder / "mode").write_text(mode)
        (folder / "pids").write_text(" ".join(map(str, pids or [])))
        (folder / "stdout.tar").write_bytes(tar)

    def pods(self, *names: str) -> None:
        (self.root / "pods").write_text(" ".join(names))

    def calls(self) -> list[str]:
        return (self.root / "calls.log").read_text().splitlines()

    def run(self, *args: str, timeout: float = 150) -> tuple[int, str, str, float]:
        started = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-m", "hangscope", *args], cwd=REPO,
                                env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, start_new_session=True)
        try:
            out, err = proc.communicate(timeout=timeout)
        finally:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        return proc.returncode, out, err, time.monotonic() - started

    def leftovers(self) -> list[int]:
        """Pids of live processes that a hangscope run of this test started."""
        found = []
        for proc in psutil.process_iter(["pid"]):
            with contextlib.suppress(psutil.Error):
                if proc.environ().get(MARK) == self.mark and \
                        proc.status() != psutil.STATUS_ZOMBIE:
                    found.append(proc.pid)
        return found


@pytest.fixture
def fakes(tmp_path: Path) -> Iterator[Fakes]:
    made = Fakes(tmp_path / "fake")
    try:
        yield made
    finally:
        left = made.leftovers()
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        assert not left, f"processes left behind: {left}"


@pytest.fixture(scope="module")
def hung(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Job]:
    ready = tmp_path_factory.mktemp("ready")
    with running_job("missing_rank", ready_dir=ready) as job:
        assert sorted(job.rank_pids) == [0, 1, 2, 3], job.output_tail()
        yield job


def verdict_of(out: Path) -> dict[str, Any]:
    verdict: dict[str, Any] = json.loads((out / "verdict.json").read_text())
    return verdict


def shim_args(fakes: Fakes, host: str) -> list[str]:
    lines = [line for line in fakes.calls() if line.startswith(f"python3 {host} ")]
    assert len(lines) == 1, fakes.calls()
    return list(json.loads(lines[0].split(" ", 2)[2]))


# -- live: a real hung job, collected through the fake clients --------------------------------

@pytest.mark.live
def test_attach_over_ssh_merges_two_hosts_into_the_culprit(hung: Job, fakes: Fakes,
                                                          tmp_path: Path) -> None:
    # GIVEN two hosts, each holding half of the hung job's ranks
    fakes.host("a", pids=[hung.rank_pids[0], hung.rank_pids[1]])
    fakes.host("b", pids=[hung.rank_pids[2], hung.rank_pids[3]])
    pattern = "missing_rank[.]py|it's $(x)"  # quotes and $ reach the remote unchanged
    # WHEN attaching over ssh to both
    code, out, err, _ = fakes.run("attach", "--ssh", "a", "--ssh", "b", "--match", pattern,
                                  "--samples", "1", "--timeout", "60",
                                  "--out", str(tmp_path / "out"))
    # THEN each host sent its bundle and the merged verdict names the culprit
    assert code == ExitCode.HANG_FOUND, out + err
    bundles = tmp_path / "out" / "bundles"
    assert sorted(p.name for p in bundles.iterdir() if not p.name.startswith(".")) == ["a", "b"]
    assert sorted(json.loads((bundles / "a" / MANIFEST).read_text())["ranks"]) == ["0", "1"]
    verdict = verdict_of(tmp_path / "out")
    truth = SCENARIOS["missing_rank"]
    root = verdict["findings"][0]
    assert (root["kind"], root["culprit_ranks"]) == (truth.kind, truth.culprit_ranks), out
    assert verdict["ranks_seen"] == [0, 1, 2, 3] and verdict["ranks_missing"] == []
    assert "ssh: 2 of 2 hosts collected" in out + err
    # AND each host ran collect with the selector as given, quietly and bounded
    args = shim_args(fakes, "a")
    assert args[:3] == ["-m", "hangscope", "collect"]
    assert args[args.index("--match") + 1] == pattern
    assert "--quiet" in args and float(args[args.index("--timeout") + 1]) < 60
    # AND no temporary folder is left on the "remote"
    assert not list(fakes.tmp.glob("hangscope-collect.*"))


@pytest.mark.live
def test_a_hung_host_is_cut_at_the_deadline_and_named_missing(hung: Job, fakes: Fakes,
                                                             tmp_path: Path) -> None:
    # GIVEN host a with ranks 0,1 and host b (ranks 2,3) whose ssh never answers
    fakes.host("a", pids=[hung.rank_pids[0], hung.rank_pids[1]])
    fakes.host("b", mode="hang")
    # WHEN attaching with a 15 s bound
    code, out, err, took = fakes.run("attach", "--ssh", "a", "--ssh", "b", "--pid-group",
                                     str(hung.pgid), "--samples", "1", "--timeout", "15",
                                     "--out", str(tmp_path / "out"))
    # THEN the answer comes within the bound (plus the analysis), partial, naming host b
    assert took < 15 + 20, out + err
    verdict = verdict_of(tmp_path / "out")
    assert verdict["ranks_seen"] == [0, 1] and verdict["ranks_missing"] == [2, 3]
    gaps = [gap for gap in verdict["evidence_gaps"] if gap.startswith("host b ")]
    assert gaps and "did not answer within 15 s" in gaps[0], verdict["evidence_gaps"]
    assert "ranks 2,3 missing" in gaps[0]
    assert code in (ExitCode.HANG_FOUND, ExitCode.INCONCLUSIVE), out + err
    assert "ssh: 1 of 2 hosts collected (missing: b)" in out + err
    # (the fixture checks that b's hung ssh was stopped)


@pytest.mark.live
def test_attach_k8s_selector_lists_pods_and_execs_in_each(hung: Job, fakes: Fakes,
                                                         tmp_path: Path) -> None:
    # GIVEN two running pods of the job, found by a label selector
    fakes.pods("train-0", "train-1")
    fakes.host("train-0", pids=[hung.rank_pids[0], hung.rank_pids[1]])
    fakes.host("train-1", pids=[hung.rank_pids[2], hung.rank_pids[3]])
    # WHEN attaching through kubectl in namespace ml, container trainer
    code, out, err, _ = fakes.run("attach", "--k8s-selector", "app=train", "--namespace", "ml",
                                  "--container", "trainer", "--match", "missing_rank",
                                  "--samples", "1", "--timeout", "60",
                                  "--out", str(tmp_path / "out"))
    # THEN the verdict names the culprit from both pods' bundles
    assert code == ExitCode.HANG_FOUND, out + err
    assert verdict_of(tmp_path / "out")["findings"][0]["culprit_ranks"] == \
        SCENARIOS["missing_rank"].culprit_ranks
    assert "kubectl (namespace ml): 2 of 2 pods collected" in out + err
    # AND kubectl was asked exactly this
    calls = [c for c in fakes.calls() if c.startswith("kubectl")]
    assert calls[0] == ("kubectl get pods -l app=train -n ml --field-selector=status.phase="
                        "Running -o jsonpath={.items[*].metadata.name}")
    assert sorted(calls[1:]) == ["kubectl exec train-0 -n ml -c trainer",
                                 "kubectl exec train-1 -n ml -c trainer"]


@pytest.mark.live
def test_collect_k8s_pods_then_analyze_the_folder(hung: Job, fakes: Fakes,
                                                  tmp_path: Path) -> None:
    # GIVEN two pods named on the command line, and a third that does not exist
    fakes.host("p0", pids=[hung.rank_pids[0], hung.rank_pids[1]])
    fakes.host("p1", pids=[hung.rank_pids[2], hung.rank_pids[3]])
    # WHEN collecting only
    code, out, err, _ = fakes.run("collect", "--k8s-pods", "p0,p1,gone", "--pid-group",
                                  str(hung.pgid), "--samples", "1", "--timeout", "60",
                                  "--out", str(tmp_path / "bundles"))
    # THEN two bundles came back, the missing pod is named with kubectl's reason
    assert code == 0, out + err
    assert "kubectl: 2 of 3 pods collected (missing: gone)" in out
    assert 'pods "gone" not found' in out
    # AND analyze over the folder merges them into the culprit
    code, out, err, _ = fakes.run("analyze", str(tmp_path / "bundles"), "--out",
                                  str(tmp_path / "out"))
    assert code == ExitCode.HANG_FOUND, out + err
    assert verdict_of(tmp_path / "out")["ranks_seen"] == [0, 1, 2, 3]


# -- no job needed ------------------------------------------------------------------------------

def test_hosts_that_hang_or_do_not_resolve_end_within_the_bound(fakes: Fakes,
                                                                tmp_path: Path) -> None:
    # GIVEN one host whose ssh never answers and one that does not resolve
    fakes.host("stuck", mode="hang")
    # WHEN collecting with a 4 s bound
    code, out, err, took = fakes.run("collect", "--ssh", "stuck", "--ssh", "nowhere",
                                     "--pid", "1", "--timeout", "4",
                                     "--out", str(tmp_path / "b"), timeout=60)
    # THEN nothing came back: exit 4, one line naming both and why, within the bound
    assert code == ExitCode.COULD_NOT_COLLECT, out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "stuck: did not answer within 4 s" in lines[0]
    assert "nowhere: sent no bundle (ssh exit 255: ssh: Could not resolve hostname" in lines[0]
    assert took < 4 + 8


def _tar(*members: tuple[tarfile.TarInfo, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for info, data in members:
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    return info


MANIFEST_MEMBER = (_member("./manifest.json"), b'{"schema": "hangscope.bundle/1", "ranks": {}}')
HOSTILE = {
    "traversal": (_tar(MANIFEST_MEMBER, (_member("./../../escape.txt"), b"x")),
                  "member './../../escape.txt' leaves the bundle"),
    "absolute": (_tar((_member("/tmp/hangscope-abs-escape.txt"), b"x")), "leaves the bundle"),
    "symlink-out": (_tar((_member("ranks", tarfile.SYMTYPE, "/etc"), b""),
                         (_member("ranks/passwd"), b"x")), "'ranks' is a link (to '/etc')"),
    "hardlink": (_tar((_member("f", tarfile.LNKTYPE, "/etc/passwd"), b"")), "is a link"),
    "device": (_tar((_member("null", tarfile.CHRTYPE), b"")), "not a file or folder"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_tar_is_refused_in_one_line(fakes: Fakes, tmp_path: Path, case: str) -> None:
    # GIVEN a host that answers with a crafted archive
    data, reason = HOSTILE[case]
    fakes.host("evil", mode="tar", tar=data)
    out_dir = tmp_path / "work" / "b"
    # WHEN collecting from it
    code, out, err, _ = fakes.run("collect", "--ssh", "evil", "--pid", "1", "--timeout", "20",
                                  "--out", str(out_dir), timeout=60)
    # THEN it is refused in one line that names the host and why, and nothing was written
    assert code == ExitCode.COULD_NOT_COLLECT, out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "evil: sent an unsafe bundle, refused" in lines[0], err
    assert reason in lines[0], err
    assert not (out_dir / "evil").exists()
    assert not (tmp_path / "work" / "escape.txt").exists()
    assert not (tmp_path / "escape.txt").exists()
    assert not Path("/tmp/hangscope-abs-escape.txt").exists()


def test_a_stream_that_is_no_tar_is_named_as_such(fakes: Fakes, tmp_path: Path) -> None:
    # GIVEN a host whose login script prints to stdout, so what comes back is no tar
    fakes.host("chatty", mode="tar", tar=b"Welcome to node 7!\n" * 50)
    # WHEN collecting from it
    code, out, err, _ = fakes.run("collect", "--ssh", "chatty", "--pid", "1", "--timeout", "20",
                                  "--out", str(tmp_path / "b"), timeout=60)
    # THEN one line says what came back and the likely cause
    assert code == ExitCode.COULD_NOT_COLLECT, out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "chatty: sent no readable bundle: not a tar archive" in lines[0]
    assert "login script" in lines[0]


def test_unpack_bundle_limits_members_and_bytes(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a plain bundle archive of three files
    archive = tmp_path / "b.tar"
    archive.write_bytes(_tar(MANIFEST_MEMBER, (_member("./ranks/0/a"), b"12345"),
                             (_member("./ranks/0/b"), b"67890")))
    # THEN within the limits it unpacks
    unpack_bundle(str(archive), str(tmp_path / "ok"))
    assert (tmp_path / "ok" / "ranks" / "0" / "b").read_bytes() == b"67890"
    # AND past either limit it is refused, leaving nothing behind
    monkeypatch.setattr(remote, "MAX_MEMBERS", 2)
    with pytest.raises(UnsafeBundle, match="more than 2 members"):
        unpack_bundle(str(archive), str(tmp_path / "many"))
    monkeypatch.setattr(remote, "MAX_MEMBERS", 100)
    monkeypatch.setattr(remote, "MAX_TAR_BYTES", 50)
    with pytest.raises(UnsafeBundle, match="more than 0 MiB"):
        unpack_bundle(str(archive), str(tmp_path / "big"))
    assert not (tmp_path / "many").exists() and not (tmp_path / "big").exists()


@pytest.mark.parametrize(("args", "message"), [
    (["--ssh", "a", "--k8s-pods", "p"], "give one of --ssh and --k8s-pods, not both"),
    (["--namespace", "ml", "--pid", "1"], "--namespace needs --k8s-pods or --k8s-selector"),
    (["--ssh", "a"], "give the job selector each host applies"),
    (["--ssh", "a", "--pid", "1", "--slurm-job", "5"], "give --slurm-job or --ssh/--k8s-*"),
    (["--k8s-pods", ",", "--pid", "1"], "is not a list of pod names"),
    (["--ssh", "-oProxyCommand=x", "--pid", "1"], "is not a host name"),
], ids=["ssh-and-k8s", "namespace-alone", "no-selector", "with-slurm", "no-pods", "option-host"])
def test_options_that_do_not_fit_are_usage_errors(args: list[str], message: str, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    for command in ("collect", "attach"):
        code = main([command, *args, "--out", str(tmp_path / command)])
        err = capsys.readouterr().err
        assert code == ExitCode.BAD_INPUT, err
        assert message in err, err
        assert not (tmp_path / command).exists()
