"""``attach --force`` into an old ``--out``: the earlier bundle goes, so none of its files can sit
beside the new collection; a folder that is not a bundle is never deleted."""

from __future__ import annotations

import os

import pytest

from hangscope.bundle import BundleWriter, clear_old_bundle, is_bundle
from hangscope.errors import UsageError


def _old_bundle(root) -> None:
    writer = BundleWriter(str(root))
    writer.add_file(0, "py-spy", "stacks-111-0.json", b"{}")
    writer.add_job_file("log", "torchrun.log", b"old")
    writer.close()


def test_an_earlier_bundle_is_removed(tmp_path) -> None:
    root = tmp_path / "bundle"
    _old_bundle(root)
    assert is_bundle(str(root))
    clear_old_bundle(str(root))
    assert not root.exists()


def test_a_bundle_cut_short_before_its_manifest_is_removed_too(tmp_path) -> None:
    root = tmp_path / "bundle"
    (root / "ranks" / "0").mkdir(parents=True)
    (root / "ranks" / "0" / "stacks-111-0.json").write_text("{}")
    clear_old_bundle(str(root))
    assert not root.exists()


def test_a_missing_folder_is_fine(tmp_path) -> None:
    clear_old_bundle(str(tmp_path / "bundle"))


@pytest.mark.parametrize("make", ["foreign_file", "file", "link"])
def test_anything_else_is_refused_and_kept(tmp_path, make) -> None:
    root = tmp_path / "bundle"
    if make == "foreign_file":
        _old_bundle(root)
        (root / "notes.txt").write_text("mine")
    elif make == "file":
        root.write_text("not a folder")
    else:
        target = tmp_path / "elsewhere"
        _old_bundle(target)
        os.symlink(target, root)
    with pytest.raises(UsageError, match="is not a hangscope bundle"):
        clear_old_bundle(str(root))
    assert os.path.lexists(root)
