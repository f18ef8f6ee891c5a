"""``spherepde bench --speed`` (issue 36): the plumbing -- entries run, rows summarised, the report
written as JSON without replacing an existing file unasked. The entries themselves are tested in
their own files (tests/studies/test_bench_*.py); here they are replaced by a fast stand-in."""

from __future__ import annotations

import json
import sys
import types

import pytest

from spherepde.cli.main import main
from spherepde.studies import speed


@pytest.fixture
def fake_entries(monkeypatch):
    mod = types.ModuleType("spherepde_fake_speed_entry")

    def bench(quick):
        return {"ratio": 4.0 if not quick else 2.0, "ratio_of": "wall time per unit time", "target_ratio": 3.0,
                "accuracy": {"energy_rel": 1e-5}, "accuracy_bound": "1e-3", "old": "a", "new": "b", "target_met": not quick, "extra": [1, 2]}

    mod.bench = bench
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    monkeypatch.setattr(speed, "ENTRIES", (("one", "a stand-in", f"{mod.__name__}:bench"), ("two", "another", f"{mod.__name__}:bench")))


def test_rows_keep_ratio_accuracy_and_detail(fake_entries):
    r = speed.run_speed(False, only=["two"])
    assert list(r["entries"]) == ["two"]
    e = r["entries"]["two"]
    assert e["ratio"] == 4.0 and e["accuracy"] == {"energy_rel": 1e-5} and e["target_met"] is True
    assert e["detail"]["extra"] == [1, 2]
    q = speed.run_speed(True)
    assert [q["entries"][k]["target_met"] for k in ("one", "two")] == [None, None]  # quick never claims a target
    with pytest.raises(ValueError, match="unknown speed entry nope"):
        speed.run_speed(False, only=["nope"])


def test_cli_writes_json_and_never_replaces_unasked(fake_entries, tmp_path, capsys):
    out = tmp_path / "speed.json"
    assert main(["bench", "--speed", "--out", str(out)]) == 0
    d = json.loads(out.read_text())
    assert set(d["entries"]) == {"one", "two"} and d["command"].startswith("spherepde bench --speed")
    before = out.read_text()
    assert main(["bench", "--speed", "--out", str(out)]) == 2
    assert "pass --force" in capsys.readouterr().err and out.read_text() == before
    assert main(["bench", "--speed", "--quick", "--out", str(out), "--force"]) == 0
    assert json.loads(out.read_text())["quick"] is True
    assert main(["bench", "--speed", "--out", str(tmp_path / "no" / "x.json")]) == 2
    assert main(["bench", "--only", "one"]) == 2


def test_cli_refuses_a_folder_and_a_stray_force_before_running(fake_entries, tmp_path, capsys, monkeypatch):
    ran = []
    monkeypatch.setattr(speed, "run_speed", lambda *a, **k: ran.append(1) or {})
    assert main(["bench", "--speed", "--out", str(tmp_path), "--force"]) == 2  # --force replaces files, never a folder
    assert "is a folder" in capsys.readouterr().err and tmp_path.is_dir()
    assert main(["bench", "--speed", "--force"]) == 2  # --force without --out: nothing to replace
    assert main(["bench", "--force"]) == 2  # not silently the other benchmarks
    assert "--force goes with" in capsys.readouterr().err and ran == []


def test_report_names_the_entries_it_ran(fake_entries):
    assert speed.run_speed(False)["command"] == speed.COMMAND == "spherepde bench --speed"  # what ran: no --out (it wrote no file)
    assert speed.run_speed(False, out=speed.REPORT_FILE)["command"] == "spherepde bench --speed --out benchmarks/speed.json"
    assert speed.run_speed(True, out="my dir/s.json")["command"] == "spherepde bench --speed --out 'my dir/s.json' --quick"
    assert speed.run_speed(True, only=["two"])["command"] == speed.COMMAND + " --quick --only two"
    assert speed.run_speed(False, only=["two", "one", "two"])["command"] == speed.COMMAND  # all of them, in any order
