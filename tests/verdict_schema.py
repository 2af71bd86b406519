"""Every ``verdict.json`` the test suite writes validates against the shipped JSON Schema.

A pytest plugin, loaded by tests/conftest.py (which imports its hooks):

* after each test's call and before its fixtures are torn down (``tmp_path`` of a passing test
  is deleted then, ``tmp_path_retention_policy = "failed"``), every ``verdict.json`` under the
  test's ``tmp_path`` is validated;
* at the end of the session, every ``verdict.json`` left under the session's basetemp
  (``tmp_path_factory.mktemp`` folders, failed tests' ``tmp_path``) is validated, and so is
  every ``hangscope-*/verdict.json`` written during the session into the working directory or
  the repository root (a command run without ``--out``): those are named as written outside
  basetemp.

Any verdict that does not validate fails the session (exit status 1) and is named, with what is
wrong, in the terminal summary. Also used by tests/test_schema.py.
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest

from hangscope.schema import load_schema

STARTED = time.time()  # imported at session start, with conftest.py
_checked: set[tuple[str, int, int]] = set()
_problems: list[str] = []
_outside: list[str] = []
_skipped: list[str] = []


@functools.lru_cache(maxsize=1)
def validator() -> Any:
    """The validator the schema declares (its ``$schema``), with format checks on."""
    from jsonschema.validators import validator_for

    schema = load_schema()
    cls = validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def problems(doc: Any) -> list[str]:
    """What is wrong with one verdict document, one line each ("path: message"); [] if valid."""
    errors = sorted(validator().iter_errors(doc), key=lambda e: list(e.absolute_path))
    return [f"{'/'.join(str(p) for p in e.absolute_path) or '(top)'}: {e.message}"
            for e in errors]


def file_problems(path: str) -> list[str]:
    try:
        with open(path, encoding="utf-8") as handle:
            doc = json.load(handle)
    except (OSError, ValueError) as exc:
        return [f"not readable as JSON: {exc}"]
    return problems(doc)


def verdict_files(root: str) -> Iterator[str]:
    for folder, _, names in os.walk(root):
        if "verdict.json" in names:
            yield os.path.join(folder, "verdict.json")


def check_tree(root: str, who: str) -> None:
    """Validate every verdict.json under ``root`` not checked yet (as it is now)."""
    if not _jsonschema_installed():
        return
    for path in verdict_files(root):
        try:
            st = os.stat(path)
        except OSError:
            continue
        key = (path, st.st_mtime_ns, st.st_size)
        if key in _checked:
            continue
        _checked.add(key)
        _problems.extend(f"{path} ({who}): {line}" for line in file_problems(path)[:5])


@functools.lru_cache(maxsize=1)
def _jsonschema_installed() -> bool:
    try:
        import jsonschema  # noqa: F401
    except ImportError:
        _skipped.append("verdict.json files were not validated: jsonschema is not installed "
                        "(pip install -e '.[test]')")
        return False
    return True


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    """Before the test's fixtures go (and a passing test's tmp_path with them)."""
    tmp = getattr(item, "funcargs", {}).get("tmp_path")
    if tmp is not None:
        check_tree(str(tmp), item.nodeid)


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Before pytest's tmpdir plugin removes basetemp: the rest of it, and stray default
    output folders; fail the session if any verdict does not validate."""
    factory = getattr(session.config, "_tmp_path_factory", None)
    if factory is not None:
        check_tree(str(factory.getbasetemp()), "session basetemp")
    roots = {str(session.config.invocation_params.dir), str(session.config.rootpath)}
    for root in sorted(roots):
        try:
            names = os.listdir(root)
        except OSError:
            continue
        for name in sorted(names):
            path = os.path.join(root, name, "verdict.json")
            if name.startswith("hangscope-") and os.path.isfile(path) \
                    and os.stat(path).st_mtime >= STARTED:
                _outside.append(path)
                check_tree(os.path.join(root, name), "written outside basetemp")
    if _problems and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for line in _skipped:
        terminalreporter.write_line(f"verdict schema: {line}", yellow=True)
    if _outside:
        terminalreporter.write_line(
            "verdict schema: verdicts written outside basetemp (give the command --out "
            "under tmp_path): " + ", ".join(_outside), yellow=True)
    if _problems:
        terminalreporter.section("verdict.json files that do not match the shipped schema",
                                 red=True)
        for line in _problems:
            terminalreporter.write_line(line, red=True)
