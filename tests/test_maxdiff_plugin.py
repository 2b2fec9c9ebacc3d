"""``pytest -p maxdiff``: the measured distance behind each equality assertion of a test."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HELPERS = Path(__file__).parent / "helpers"

CASE = '''
import numpy as np
import pytest
import torch


def test_distances():
    a = torch.tensor([1.0, 2.0], dtype=torch.float64)
    b = a + torch.tensor([0.0, 3e-7], dtype=torch.float64)
    assert (a - b).abs().max() < 1e-6
    assert abs(float(a[0]) - 1.25) < 1
    assert float(a[1]) == pytest.approx(2.000004, rel=1e-5)
    torch.testing.assert_close(a, a + 5e-9)
    assert np.abs(a.numpy() - 1.0).max() < 2
    assert torch.equal(a, a.clone())
'''


def test_each_assertion_line_gets_its_measured_difference(tmp_path: Path) -> None:
    (tmp_path / "test_case.py").write_text(CASE)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HELPERS), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "maxdiff", "-p", "no:cacheprovider",
                          str(tmp_path / "test_case.py")], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = {int(line.split("  ")[0].rsplit(":", 1)[1]): float(line.split("  ")[1])
             for line in out.stdout.splitlines() if line.startswith("test_case.py::test_distances:")}
    # CASE's lines: 10 the .abs().max() idiom, 11 abs() of floats, 12 approx, 13 assert_close,
    # 14 numpy abs, 15 equal
    assert abs(lines[10] - 3e-7) < 1e-12 and lines[11] == 0.25 and abs(lines[12] - 4e-6) < 1e-12
    assert abs(lines[13] - 5e-9) < 1e-15 and lines[14] == 1.0 and lines[15] == 0.0
