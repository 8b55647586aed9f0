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


def test_psgd_without_jit_warns_of_no_overflow():
    # The draws' xorshift64* multiplies uint64 numbers that wrap by design:
    # compiled it is silent, but with NUMBA_DISABLE_JIT=1 NumPy's scalars
    # warned of an overflow at a line of the package (an error under
    # -W error, as a strict caller runs).
    env = dict(os.environ, NUMBA_DISABLE_JIT="1")
    env["PYTHONPATH"] = os.pathsep.join([str(HERE.parent), env.get("PYTHONPATH", "")])
    script = (
        "from attention_cluster import AttentionClustering\n"
        "from attention_cluster.datasets import make_mixture\n"
        "import scipy.sparse as sp\n"
        "X = make_mixture(300, 5, 2, noise=0.3, random_state=0)[0]\n"
        "for given in (X, sp.csr_matrix(X)):\n"
        "    AttentionClustering(2, solver='psgd', max_iter=50, random_state=0).fit(given)\n"
    )
    result = subprocess.run(
        [sys.executable, "-W", "error::RuntimeWarning", "-c", script],
        capture_output=True,
        text=True,
        env=env,
        cwd=HERE.parent,
    )
    assert result.returncode == 0, result.stderr[-3000:]
