"""The kernel tests again with Numba's JIT disabled.

Run as plain Python, the kernels' bodies are visible to coverage and their
semantics (integer wrap-around of the generator included) are checked
against the same NumPy twins.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


@pytest.mark.parametrize(
    "tests",
    [
        ["test_kernels.py"],
        ["test_dynamics.py", "-k", "attention_matches or exp_shifted or group_tokens"],
    ],
    ids=["kernels", "dynamics_kernels"],
)
def test_kernel_tests_pass_without_jit(tests):
    env = dict(os.environ, NUMBA_DISABLE_JIT="1")
    env["PYTHONPATH"] = os.pathsep.join([str(HERE.parent), env.get("PYTHONPATH", "")])
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-W",
            "ignore:overflow encountered:RuntimeWarning",
            str(HERE / tests[0]),
            *tests[1:],
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=HERE.parent,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
