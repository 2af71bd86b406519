"""Layered ptrace/proc access diagnosis. We run as root here, so each refusing layer is injected
through ``Readers``; the "pid gone" and "all readable" cases use real processes."""

from __future__ import annotations

import dataclasses
import errno
import os
from pathlib import Path

import pytest
from procs.procutil import family_args, started

from hangscope.collect.permissions import (
    CAP_SYS_PTRACE,
    PTRACE_HELP,
    AccessProblem,
    PtraceDenied,
    Readers,
    check_access,
    diagnose,
    explain_failure,
    require_access,
)
from hangscope.errors import ExitCode

ALL_CAPS = (1 << 41) - 1
NO_PTRACE_CAP = ALL_CAPS & ~(1 << CAP_SYS_PTRACE)


def fake(**changes: object) -> Readers:
    """A machine where everything allows tracing pid 1234 (uid 1000 traces uid 1000), changed."""
    base = Readers(pid_exists=lambda pid: True, signal0=lambda pid: None, euid=lambda: 1000,
                   ptrace_scope=lambda: 0, cap_eff=lambda: 0, in_container=lambda: False,
                   proc_dir_exists=lambda pid: True, is_descendant=lambda pid: False,
                   target_uid=lambda pid: 1000)
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def refuse(exc: type[OSError]):  # noqa: ANN201
    def signal0(pid: int) -> None:
        raise exc(errno.EPERM, "Operation not permitted")
    return signal0


class TestLayers:
    def test_nothing_forbids(self) -> None:
        assert diagnose(1234, fake()) is None

    def test_layer1_pid_does_not_exist(self) -> None:
        problem = diagnose(1234, fake(pid_exists=lambda pid: False))
        assert problem is not None and "does not exist" in problem.cause

    def test_layer2_other_uid(self) -> None:
        problem = diagnose(1234, fake(signal0=refuse(PermissionError), target_uid=lambda p: 42))
        assert problem == AccessProblem(1234, "the process belongs to uid 42 and we run as uid "
                                              "1000", problem.fix)
        assert "sudo -E" in problem.fix

    def test_layer2_exited_between_checks(self) -> None:
        problem = diagnose(1234, fake(signal0=refuse(ProcessLookupError)))
        assert problem is not None and "exited" in problem.cause

    @pytest.mark.parametrize("scope", [1, 2])
    def test_layer3_yama_and_not_root(self, scope: int) -> None:
        problem = diagnose(1234, fake(ptrace_scope=lambda: scope))
        assert problem is not None
        assert f"ptrace_scope is {scope} and we are not root" in problem.cause
        assert "sysctl kernel.yama.ptrace_scope=0" in problem.fix

    def test_layer3_scope1_allows_our_own_descendants(self) -> None:
        assert diagnose(1234, fake(ptrace_scope=lambda: 1, is_descendant=lambda p: True)) is None

    def test_layer3_cap_sys_ptrace_overrides_yama(self) -> None:
        assert diagnose(1234, fake(ptrace_scope=lambda: 2, cap_eff=lambda: ALL_CAPS)) is None

    def test_layer3_scope3_blocks_even_root(self) -> None:
        problem = diagnose(1234, fake(ptrace_scope=lambda: 3, euid=lambda: 0,
                                      cap_eff=lambda: ALL_CAPS))
        assert problem is not None and "ptrace_scope is 3" in problem.cause

    def test_layer4_root_in_container_without_cap_sys_ptrace(self) -> None:
        problem = diagnose(1234, fake(euid=lambda: 0, ptrace_scope=lambda: 1,
                                      cap_eff=lambda: NO_PTRACE_CAP, in_container=lambda: True))
        assert problem is not None
        assert "in a container that dropped CAP_SYS_PTRACE" in problem.cause
        assert "--cap-add=SYS_PTRACE" in problem.fix and "securityContext" in problem.fix

    def test_layer4_root_without_cap_tracing_another_uid(self) -> None:
        problem = diagnose(1234, fake(euid=lambda: 0, cap_eff=lambda: NO_PTRACE_CAP,
                                      target_uid=lambda p: 1000, in_container=lambda: True))
        assert problem is not None and "uid 1000" in problem.cause
        assert "without CAP_SYS_PTRACE" in problem.cause


class TestFailures:
    def test_yama_esrch_while_proc_entry_exists(self) -> None:
        problem = explain_failure(1234, OSError(errno.ESRCH, "No such process"), fake())
        assert "/proc/1234 exists" in problem.cause and "ptrace_scope=0" in problem.fix

    def test_esrch_for_a_gone_process(self) -> None:
        problem = explain_failure(1234, errno.ESRCH, fake(proc_dir_exists=lambda p: False))
        assert "exited during collection" in problem.cause

    def test_eperm_with_nothing_visible_blames_a_policy(self) -> None:
        problem = explain_failure(1234, errno.EPERM, fake())
        assert "seccomp" in problem.fix

    def test_a_visible_layer_wins_over_the_errno(self) -> None:
        problem = explain_failure(1234, errno.EPERM, fake(ptrace_scope=lambda: 2))
        assert "ptrace_scope is 2" in problem.cause


class TestRealProcesses:
    def test_live_process_is_readable_as_root(self, tmp_path: Path) -> None:
        if os.geteuid() != 0:
            pytest.skip("needs root")
        ready = tmp_path / "ready"
        with started(family_args(ready), ready) as proc:
            assert diagnose(proc.pid) is None
            assert check_access([proc.pid]) == {}

    def test_gone_process(self, tmp_path: Path) -> None:
        ready = tmp_path / "ready"
        with started(family_args(ready), ready) as proc:
            pass
        problem = diagnose(proc.pid)
        assert problem is not None and problem.pid == proc.pid
        assert "does not exist" in problem.cause
        assert problem.line().startswith(f"pid {proc.pid}: ")

    def test_require_access_raises_when_no_pid_is_readable(self, tmp_path: Path) -> None:
        ready = tmp_path / "ready"
        with started(family_args(ready), ready) as proc:
            pass
        with pytest.raises(PtraceDenied) as info:
            require_access([proc.pid])
        assert info.value.exit_code == ExitCode.COULD_NOT_COLLECT
        assert info.value.help_text == PTRACE_HELP
        for words in ("sudo -E", "sysctl kernel.yama.ptrace_scope=0", "--cap-add=SYS_PTRACE",
                      "capabilities: {add: [SYS_PTRACE]}"):
            assert words in PTRACE_HELP

    def test_require_access_keeps_going_when_some_pids_are_readable(self, tmp_path: Path
                                                                      ) -> None:
        ready, ready2 = tmp_path / "ready", tmp_path / "ready2"
        with started(family_args(ready), ready) as gone:
            pass
        with started(family_args(ready2), ready2) as alive:
            problems = require_access([alive.pid, gone.pid])
        assert list(problems) == [gone.pid]
