"""records.atomic: every cache, checkpoint and summary file is written whole or not at all."""

from __future__ import annotations

import stat

import numpy as np
import pytest

from introspect.records.atomic import atomic_write, atomic_write_text


def test_a_writer_that_fails_leaves_the_old_file_and_no_temp_file(tmp_path):
    target = tmp_path / "sub" / "summary.json"
    atomic_write_text(target, "old")

    def half_then_crash(tmp: str) -> None:
        with open(tmp, "w") as fh:
            fh.write("half a fi")
        raise KeyboardInterrupt  # a killed run: BaseException, not Exception

    with pytest.raises(KeyboardInterrupt):
        atomic_write(target, half_then_crash)
    assert target.read_text() == "old"
    assert sorted(p.name for p in target.parent.iterdir()) == ["summary.json"]


def test_a_new_file_is_complete_readable_by_others_and_in_a_new_folder(tmp_path):
    target = tmp_path / "a" / "b" / "v.npy"
    arr = np.arange(5, dtype=np.float32)

    def save(tmp: str) -> None:
        with open(tmp, "wb") as fh:
            np.save(fh, arr)

    atomic_write(target, save)
    np.testing.assert_array_equal(np.load(target), arr)
    assert stat.S_IMODE(target.stat().st_mode) == 0o644  # a shared cache, not mkstemp's 0o600
    assert [p.name for p in target.parent.iterdir()] == ["v.npy"]
