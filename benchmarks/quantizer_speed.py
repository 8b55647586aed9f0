"""Speed of the in-context layer: one long prompt and a batch of short ones.

Times, after a warm-up, InContextQuantizer.transform on one prompt of
L = 1e6 tokens in d = 10, the functional layers on a batch of 1e4 prompts
of L = 100 (one batched product, no Python loop), and the softmax layer on
one prompt of L = 1e4. Medians of a few repeats. Writes
benchmarks/results/quantizer_speed.json, with the machine's load average
and the libraries' versions; ``--quick`` takes a hundredth of the tokens and
of the prompts.

    python benchmarks/quantizer_speed.py [--quick] [--out DIR]
"""

import os

from _common import quick_cli, run_conditions, save, side_by_side

from attention_cluster import InContextQuantizer
from attention_cluster.datasets import make_mixture, make_prompts
from attention_cluster.layers import (
    in_context_attention,
    in_context_softmax_attention,
    linear_attention,
)


def power_of_ten(n):
    """1000000 -> "1e6", as the results name the sizes."""
    return f"1e{len(str(n)) - 1}"


def main(quick=False, out=None, repeats=None):
    repeats = repeats or (2 if quick else 5)
    long, prompts = (10_000, 100) if quick else (1_000_000, 10_000)
    load_before = os.getloadavg()
    X, _, _ = make_mixture(long, 10, 2, noise=0.3, random_state=0)
    quantizer = InContextQuantizer(2).fit(X[:10])
    P, _, C = make_prompts(prompts, 100, 10, 2, noise=0.3, random_state=0)
    S = X[:prompts]
    heads = C[0]
    L, B = power_of_ten(long), power_of_ten(prompts)
    times = side_by_side(
        {
            f"InContextQuantizer.transform, L={L}, d=10": lambda: quantizer.transform(X),
            f"in_context_attention, {B} prompts x L=100": lambda: in_context_attention(
                P, temperature=0.8
            ),
            f"linear_attention (2 heads), {B} prompts x L=100": lambda: linear_attention(
                P, heads, temperature=0.8
            ),
            f"in_context_softmax_attention, L={B}": lambda: in_context_softmax_attention(
                S, temperature=0.8
            ),
        },
        repeats=repeats,
    )
    for name, seconds in times.items():
        print(f"{name:50s} {seconds * 1e3:9.1f} ms")
    payload = {
        "quick": quick,
        "seconds": times,
        "repeats": repeats,
        **run_conditions(load_before),
    }
    save("quantizer_speed", payload, **({"directory": out} if out else {}))
    return payload


if __name__ == "__main__":
    quick_cli(__doc__, main)
