"""Files written all or nothing (:mod:`lenscope.models.atomic_files`): the previous file or the new one, never a
file cut short, no temporary file left behind, a full disk named, the umask's permissions, formats inferred from
the suffix."""

from __future__ import annotations

import errno
import gzip
import os
import threading

import pandas as pd
import pytest

from lenscope.errors import user_message
from lenscope.models import atomic_files
from lenscope.models.atomic_files import atomic_gzip, atomic_open, atomic_path, is_temporary, write_bytes, write_text


def _names(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_the_new_file_replaces_the_old_one_whole_only_when_the_block_ends(tmp_path):
    out = tmp_path / "table.csv"
    out.write_text("old\n")
    with atomic_open(out) as handle:
        handle.write("new,")
        handle.flush()
        assert out.read_text() == "old\n"  # mid-write, readers still see the previous file
        handle.write("row\n")
    assert out.read_text() == "new,row\n"
    assert _names(tmp_path) == ["table.csv"]


def test_a_failure_inside_the_block_keeps_the_previous_file_and_leaves_no_temporary_file(tmp_path):
    out = tmp_path / "runs.parquet"
    out.write_bytes(b"previous good file")
    with pytest.raises(KeyboardInterrupt), atomic_path(out) as temporary:
        temporary.write_bytes(b"PAR1 cut sh")
        raise KeyboardInterrupt  # Ctrl-C or `kill` mid-write
    assert out.read_bytes() == b"previous good file"
    assert _names(tmp_path) == ["runs.parquet"]


@pytest.mark.parametrize("failure", [OSError(errno.ENOSPC, "No space left on device"),
                                     RuntimeError("Error while serializing: No space left on device (os error 28)")])
def test_a_full_disk_is_raised_as_enospc_naming_the_final_file(tmp_path, failure):
    out = tmp_path / "weights.safetensors"
    with pytest.raises(OSError) as caught, atomic_path(out):
        raise failure
    assert caught.value.errno == errno.ENOSPC and caught.value.filename == str(out)
    assert str(tmp_path) in user_message(caught.value) and "full" in user_message(caught.value)
    assert _names(tmp_path) == []


def test_a_full_disk_when_flushing_keeps_the_previous_file(tmp_path, monkeypatch):
    out = tmp_path / "table.csv"
    out.write_text("a,b\n1,2\n")

    def fsync(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(OSError, match="no space left on the disk holding") as caught:
        write_text(out, "a,b\n3,")
    assert caught.value.filename == str(out)
    assert out.read_text() == "a,b\n1,2\n" and _names(tmp_path) == ["table.csv"]


def test_a_missing_folder_is_named_by_the_file_asked_for(tmp_path):
    out = tmp_path / "no-such-folder" / "out.json"
    with pytest.raises(FileNotFoundError) as caught:
        write_text(out, "{}")
    assert caught.value.filename == str(out)


def test_a_new_file_has_the_umask_permissions_and_a_replaced_one_keeps_its_own(tmp_path):
    old = os.umask(0o027)
    try:
        write_bytes(tmp_path / "new.bin", b"x")
        private = tmp_path / "private.json"
        private.write_text("{}")
        private.chmod(0o600)
        write_text(private, '{"a": 1}')
    finally:
        os.umask(old)
    assert (tmp_path / "new.bin").stat().st_mode & 0o777 == 0o640
    assert private.stat().st_mode & 0o777 == 0o600


def test_a_writer_inferring_the_format_from_the_suffix_still_sees_it(tmp_path):
    out = tmp_path / "runs.csv.gz"
    frame = pd.DataFrame({"run_id": [1, 2], "tokens": [10, 20]})
    with atomic_path(out) as temporary:
        assert temporary.name.endswith(".csv.gz") and is_temporary(temporary)
        frame.to_csv(temporary, index=False)  # compression="infer": gzip from the suffix
    assert gzip.decompress(out.read_bytes()).decode() == "run_id,tokens\n1,10\n2,20\n"
    pd.testing.assert_frame_equal(pd.read_csv(out), frame)


def test_a_gzip_file_names_the_final_file_and_is_the_same_bytes_every_time(tmp_path):
    out = tmp_path / "claims.json.gz"
    written = []
    for _ in range(2):
        with atomic_gzip(out, "wt", mtime=0) as handle:
            handle.write('{"a": 1}')
        written.append(out.read_bytes())
    assert written[0] == written[1]
    assert b"claims.json\x00" in written[0][:32] and b"tmp" not in written[0][:64]
    assert gzip.decompress(written[0]) == b'{"a": 1}'


def test_a_long_file_name_still_gets_a_temporary_name(tmp_path):
    out = tmp_path / ("é" * 120 + ".csv")  # 244 bytes: the name with a temporary mark would not fit
    write_text(out, "x\n")
    assert out.read_text() == "x\n" and _names(tmp_path) == [out.name]


def test_two_writers_to_one_file_leave_one_whole_file(tmp_path):
    out = tmp_path / "table.csv"
    rows = {w: "".join(f"{w},{i}\n" for i in range(200_000)) for w in ("a", "b")}
    threads = [threading.Thread(target=write_text, args=(out, text)) for text in rows.values()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert out.read_text() in rows.values()
    assert _names(tmp_path) == ["table.csv"]


def test_temporary_files_are_told_from_a_users_files():
    assert is_temporary(f".table.csv{atomic_files.TEMP_MARK}0123abcd.csv")
    assert is_temporary(f".model{atomic_files.TEMP_MARK}0123abcd")
    assert not any(map(is_temporary, ["table.csv", ".hidden.csv", ".x.tmp-notahash.csv", "a.tmp-0123abcd.csv"]))


def test_a_symbolic_link_is_written_through_and_stays_a_link(tmp_path):
    target, link = tmp_path / "real.csv", tmp_path / "link.csv"
    target.write_text("old\n")
    link.symlink_to(target)
    write_text(link, "new\n")
    assert link.is_symlink() and target.read_text() == "new\n"
    assert _names(tmp_path) == ["link.csv", "real.csv"]
