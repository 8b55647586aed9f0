"""Attention layers as clustering estimators.

Reference implementation of "Attention-based clustering" (NeurIPS 2025):
a linear attention layer whose heads, trained without labels on the unit
sphere, learn the centroids of a mixture, and a parameter-free attention
layer that quantises each prompt in context.
"""

from . import datasets, layers, metrics, theory
from ._choose_k import plot_n_clusters_scores
from ._choose_n_clusters import choose_n_clusters
from ._clustering import AttentionClustering
from ._dynamics import SelfAttentionDynamics, attention_flow
from ._model import SphericalMixture
from ._quantizer import InContextQuantizer
from ._validation import InvalidParameterError
from ._warm_up import warm_up

__version__ = "0.1.0"

__all__ = [
    "AttentionClustering",
    "InContextQuantizer",
    "SelfAttentionDynamics",
    "SphericalMixture",
    "InvalidParameterError",
    "attention_flow",
    "choose_n_clusters",
    "plot_n_clusters_scores",
    "warm_up",
    "datasets",
    "layers",
    "metrics",
    "theory",
    "__version__",
]
