"""Speed of the in-context layer: one long prompt and a batch of short ones.

Times, after a warm-up, InContextQuantizer.transform on one prompt of
L = 1e6 tokens in d = 10, the functional layers on a batch of 1e4 prompts
of L = 100 (one batched product, no Python loop), and the softmax layer on
one prompt of L = 1e4. Medians of a few repeats.

    python benchmarks/quantizer_speed.py
"""

from _common import save, side_by_side

from attention_cluster import InContextQuantizer
from attention_cluster.datasets import make_mixture, make_prompts
from attention_cluster.layers import (
    in_context_attention,
    in_context_softmax_attention,
    linear_attention,
)


def main(repeats=5):
    X, _, _ = make_mixture(1_000_000, 10, 2, noise=0.3, random_state=0)
    quantizer = InContextQuantizer(2).fit(X[:10])
    P, _, C = make_prompts(10_000, 100, 10, 2, noise=0.3, random_state=0)
    S = X[:10_000]
    heads = C[0]
    times = side_by_side(
        {
            "InContextQuantizer.transform, L=1e6, d=10": lambda: quantizer.transform(X),
            "in_context_attention, 1e4 prompts x L=100": lambda: in_context_attention(
                P, temperature=0.8
            ),
            "linear_attention (2 heads), 1e4 prompts x L=100": lambda: linear_attention(
                P, heads, temperature=0.8
            ),
            "in_context_softmax_attention, L=1e4": lambda: in_context_softmax_attention(
                S, temperature=0.8
            ),
        },
        repeats=repeats,
    )
    for name, seconds in times.items():
        print(f"{name:50s} {seconds * 1e3:9.1f} ms")
    save("quantizer_speed", {"seconds": times, "repeats": repeats})
    return times


if __name__ == "__main__":
    main()
