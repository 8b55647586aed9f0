"""The demo behind `make demo` runs and prints its table."""

import numpy as np
import pytest

from attention_cluster._demo import COLUMNS, run


def test_demo_prints_one_row_per_method_and_data_set():
    lines = []
    rows = run(n_samples=2000, out=lines.append)
    assert len(rows) == 9
    assert "ARI" in lines[0] and "Bayes error" in lines[0]
    # Every column of the header is explained on a line of its own.
    for column in COLUMNS:
        assert column in lines[0]
        assert sum(line.startswith(column + ":") for line in lines) == 1
    mixture = [r for r in rows if r[0].startswith("mixture") and "sigma=0.3" in r[0]]
    for _, _, seconds, ari, dist, bayes in mixture:
        assert seconds > 0 and ari > 0.8 and dist < 0.05
        assert bayes == np.float64(bayes) and 0.009 < bayes < 0.0095


def test_the_command_line_parses_its_options_before_any_fit(capsys, monkeypatch):
    # python -m attention_cluster: --help printed the whole table (it took
    # no options) and an unknown option was ignored with status 0.
    import attention_cluster._demo as demo

    calls = []
    monkeypatch.setattr(demo, "run", lambda **kwargs: calls.append(kwargs))
    with pytest.raises(SystemExit) as exit_help:
        demo.main(["--help"])
    assert exit_help.value.code == 0 and "--n-samples" in capsys.readouterr().out
    for argv in (
        ["--no-such-flag"],
        ["--n-samples", "10"],
        ["--random-state", "-1"],
        ["--random-state", str(2**32)],  # NumPy's seeds end below: a traceback after a fit
    ):
        with pytest.raises(SystemExit) as exit_bad:
            demo.main(argv)
        assert exit_bad.value.code == 2
    assert not calls
    demo.main(["--n-samples", "500", "--random-state", "3"])
    assert calls == [{"n_samples": 500, "random_state": 3}]


def test_the_first_fit_loads_the_kernels_of_the_timed_fits(monkeypatch):
    # The first fit, timed apart as the compile, was of 200 x 3 rows, which
    # run NumPy's forms of the kernels: from 2^18 numbers (26215 rows of
    # 10) the timed fit of the first mixture compiled them (4.4 s against
    # 0.016 s for the next row).
    import attention_cluster._demo as demo

    shapes = []
    fit = demo.AttentionClustering.fit

    def recorded(self, X, *args, **kwargs):
        shapes.append(np.shape(X))
        return fit(self, X, *args, **kwargs)

    monkeypatch.setattr(demo.AttentionClustering, "fit", recorded)
    run(n_samples=1000, out=lambda line: None)
    assert shapes[0] == shapes[1] == (1000, 10)


def test_a_closed_pipe_ends_the_demo_without_a_traceback():
    # python -m attention_cluster | head -1 printed BrokenPipeError's traceback.
    import subprocess
    import sys

    process = subprocess.Popen(
        [sys.executable, "-m", "attention_cluster", "--n-samples", "200"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    process.stdout.readline()
    process.stdout.close()
    _, err = process.communicate(timeout=300)
    assert b"Traceback" not in err, err.decode()
