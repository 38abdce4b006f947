"""grader.measure.blas: the BLAS kernel in a figure's header, and the word when a host forces an older one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from grader.measure import blas

ROOT = Path(__file__).resolve().parents[2]


def test_the_header_names_the_kernel_and_says_when_a_forcing_variable_distorts_it(monkeypatch):
    for name in blas.FORCING:
        monkeypatch.delenv(name, raising=False)
    plain = blas.header("run with --native-blas")
    assert plain.startswith("BLAS: ") and "thread" in plain and "distorted" not in plain
    monkeypatch.setenv("OPENBLAS_CORETYPE", "Haswell")
    forced = blas.header("run with --native-blas")
    assert "OPENBLAS_CORETYPE=Haswell" in forced and "distorted" in forced and "run with --native-blas" in forced


def test_without_forcing_drops_both_variables_and_nothing_else():
    environ = {"OPENBLAS_CORETYPE": "Haswell", "OPENBLAS_L2_SIZE": "512", "OPENBLAS_NUM_THREADS": "1", "HOME": "/h"}
    assert blas.without_forcing(environ) == {"OPENBLAS_NUM_THREADS": "1", "HOME": "/h"}


def test_a_benchmark_run_with_native_blas_runs_without_the_forcing_variables(tmp_path):
    script = tmp_path / "bench_probe.py"
    script.write_text(
        f"import os, sys\nsys.path[:0] = [{str(ROOT)!r}]\n"
        "import grader.measure.bench\n"
        "print(os.environ.get('OPENBLAS_CORETYPE'), os.environ.get('OPENBLAS_NUM_THREADS'))\n"
    )
    env = {"PATH": "/usr/bin:/bin", "OPENBLAS_CORETYPE": "Haswell", "OPENBLAS_L2_SIZE": "512"}
    for flags, want in (([], "Haswell 1"), (["--native-blas"], "None 1")):
        out = subprocess.run(
            [sys.executable, str(script), *flags], env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path
        )
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip().splitlines()[-1] == want
