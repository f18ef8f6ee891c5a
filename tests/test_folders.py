"""The one reader of diagnostics tables (spherepde.runs.folders.read_diagnostics): used by the
runner, Monte-Carlo, compare, the figures, the NetCDF export and sweeps."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from spherepde.runs.folders import DiagnosticsError, read_diagnostics

GOOD = "t,energy,G2\n0.0,0.1,0.30000000000000004\n0.1,0.2,1e-300\n"


def test_values_are_the_floats_written_bit_for_bit(tmp_path):
    p = tmp_path / "diagnostics.csv"
    p.write_text(GOOD + "0.2,nan,inf\n")
    d = read_diagnostics(p)
    assert list(d) == ["t", "energy", "G2"]
    assert d["G2"][0] == 0.1 + 0.2 and d["G2"][1] == 1e-300 and d["G2"].dtype == np.float64
    assert np.isnan(d["energy"][2]) and d["G2"][2] == np.inf
    head = tmp_path / "head.csv"
    head.write_text("t,energy\n")
    assert {k: v.shape for k, v in read_diagnostics(head).items()} == {"t": (0,), "energy": (0,)}


@pytest.mark.parametrize("malformed", ["raise", "last", "skip"])
def test_an_unfinished_last_line_of_a_run_still_writing(tmp_path, malformed, caplog):
    p = tmp_path / "diagnostics.csv"
    p.write_text(GOOD + "0.2,0.3")  # no line end: the run is writing it
    if malformed == "raise":
        with pytest.raises(DiagnosticsError, match=r"diagnostics.csv: row 4: 2 fields for 3 columns"):
            read_diagnostics(p, malformed=malformed)
        return
    with caplog.at_level(logging.WARNING):
        d = read_diagnostics(p, malformed=malformed)
    assert d["t"].tolist() == [0.0, 0.1]
    assert ("skipping a malformed row" in caplog.text) == (malformed == "skip")


def test_a_complete_garbage_row_names_the_file_and_row_unless_skipped(tmp_path, caplog):
    p = tmp_path / "diagnostics.csv"
    p.write_text("t,energy,G2\n0.0,0.1,0.2\nabc,0.2,0.3\n0.2,0.3,0.4\n")
    for mode in ("raise", "last"):
        with pytest.raises(DiagnosticsError) as err:
            read_diagnostics(p, malformed=mode)
        assert str(err.value) == f"{p}: row 3: column 't' holds 'abc', not a number; the run folder is damaged"
    with caplog.at_level(logging.WARNING):
        assert read_diagnostics(p, malformed="skip")["t"].tolist() == [0.0, 0.2]
    assert "skipping a malformed row" in caplog.text


@pytest.mark.parametrize("content, words", [
    (b"", "is empty: the run has recorded nothing yet"),
    (b"energy,G2\n0.1,0.2\n", "row 1 is not a diagnostics header (no column 't')"),
    (b"t,energy\n\xff\xfe,1\n", "cannot be read as a diagnostics table"),
])
def test_what_is_no_diagnostics_table_is_one_line_naming_the_file(tmp_path, content, words):
    p = tmp_path / "diagnostics.csv"
    p.write_bytes(content)
    with pytest.raises(DiagnosticsError) as err:
        read_diagnostics(p)
    assert words in str(err.value) and str(p) in str(err.value) and "\n" not in str(err.value)
    assert isinstance(err.value, ValueError)
    with pytest.raises(ValueError, match="malformed='sometimes'"):
        read_diagnostics(p, malformed="sometimes")
