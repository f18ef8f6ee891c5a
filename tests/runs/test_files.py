"""The one safe array reader and the one atomic writer (spherepde._base), and that the package
reads arrays and replaces files only through them (issue 25)."""

import ast
import io
import zipfile
from pathlib import Path

import numpy as np
import pytest

from spherepde._base import atomic_file, atomic_savez, atomic_write_text, check_array_file, load_arrays

PKG = Path(__file__).resolve().parents[2] / "spherepde"


def test_atomic_file_replaces_only_on_success(tmp_path):
    target = tmp_path / "a.txt"
    atomic_write_text(target, "old\n")
    with pytest.raises(RuntimeError), atomic_file(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("disk full")
    assert target.read_text() == "old\n" and sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]
    with atomic_file(target, suffix=".txt") as tmp:
        assert tmp.parent == tmp_path and tmp.name.startswith(".a.txt.") and tmp.suffix == ".txt"
        tmp.write_text("new\n")
    assert target.read_text() == "new\n" and sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]


def test_atomic_savez_rotates_the_previous_file(tmp_path):
    cur, prev = tmp_path / "c.npz", tmp_path / "c.prev.npz"
    atomic_savez(cur, rotate_to=prev, x=np.arange(3))
    assert not prev.exists()
    atomic_savez(cur, rotate_to=prev, x=np.arange(4))
    with load_arrays(cur) as z, load_arrays(prev) as zp:
        assert z["x"].size == 4 and zp["x"].size == 3


def _forged_npy(shape=(10**6,)) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<f8", "fortran_order": False, "shape": shape})
    return buf.getvalue() + b"\0" * 16


def test_load_arrays_refuses_pickles_and_forged_headers(tmp_path):
    obj = tmp_path / "obj.npy"
    np.save(obj, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match="holds Python objects"):
        load_arrays(obj)
    forged = tmp_path / "forged.npy"
    forged.write_bytes(_forged_npy())
    with pytest.raises(ValueError, match="header claims an array of shape"):
        load_arrays(forged)
    archive = tmp_path / "forged.npz"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("ok.npy", _forged_npy((2,)))
        zf.writestr("A.npy", _forged_npy())
    with pytest.raises(ValueError, match=r"\(array 'A'\): damaged"):
        load_arrays(archive)
    with pytest.raises(ValueError, match="is a directory"):
        load_arrays(tmp_path)
    with pytest.raises(FileNotFoundError):
        load_arrays(tmp_path / "missing.npy")
    junk = tmp_path / "junk.npy"
    junk.write_bytes(b"not an array")
    with pytest.raises(ValueError, match="not a NumPy"):
        load_arrays(junk)
    check_array_file(junk, tolerant=True)  # unreadable headers are left to the reader
    with pytest.raises(ValueError, match="damaged"):
        check_array_file(forged, tolerant=True)  # but a forged one is refused
    good = tmp_path / "good.npy"
    np.save(good, np.arange(5.0))
    assert load_arrays(good, mmap_mode="r")[4] == 4.0


def _calls(tree):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            yield node


def test_the_package_reads_arrays_and_replaces_files_only_through_base():
    """No np.load / np.lib.format.read_array and no Path.replace / os.replace outside
    spherepde/_base.py."""
    offenders = []
    for f in sorted(PKG.rglob("*.py")):
        rel = f.relative_to(PKG).as_posix()
        if rel == "_base.py":
            continue
        for call in _calls(ast.parse(f.read_text())):
            name = call.func.attr
            owner = ast.unparse(call.func.value)
            if (name == "load" and owner in ("np", "numpy")) or name == "read_array" or (name == "replace" and owner in ("os",)):
                offenders.append(f"{rel}:{call.lineno} {owner}.{name}")
            elif name == "replace" and len(call.args) == 1 and not call.keywords and not isinstance(call.args[0], ast.Constant):
                # str.replace takes two arguments; one non-literal argument is Path.replace (a rename)
                offenders.append(f"{rel}:{call.lineno} {owner}.replace")
    assert offenders == []
