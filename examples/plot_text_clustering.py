"""
Clustering documents: TF-IDF, against KMeans and MiniBatchKMeans
================================================================

The task: a pile of documents, no labels, and the question "what are they
about?". The usual recipe is scikit-learn's: a
:class:`~sklearn.feature_extraction.text.TfidfVectorizer` (sparse rows of
unit norm), then :class:`~sklearn.cluster.KMeans` or
:class:`~sklearn.cluster.MiniBatchKMeans` on the matrix, then the words
that weigh most in each cluster. :class:`~attention_cluster.AttentionClustering`
takes the same sparse matrix as it is (never densified), and its clusters
are directions, which is what TF-IDF rows of unit norm are.

The corpus comes from :func:`attention_cluster.datasets.make_corpus`: ten
topics over a Zipf vocabulary whose frequent words are shared by every
topic, as stop words are, with short documents (40 words on average) and
a quarter of each document's words drawn from its topic. The topics are
known, so the clusterings can be scored (adjusted Rand index, ARI), and
the words are named ``w0``, ``w1``, ... by frequency.
"""

# %%
# The corpus and its TF-IDF matrix
# --------------------------------

import time

import matplotlib.pyplot as plt
import numpy as np
from sklearn.cluster import KMeans, MiniBatchKMeans
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.metrics import adjusted_rand_score
from sklearn.metrics.cluster import contingency_matrix

from attention_cluster import AttentionClustering
from attention_cluster.datasets import make_corpus

N_TOPICS = 10
texts, topics = make_corpus(
    3000, N_TOPICS, n_words=10000, document_length=40, topic_share=0.25, random_state=0
)
vectorizer = TfidfVectorizer()
X = vectorizer.fit_transform(texts)
words = vectorizer.get_feature_names_out()
print(f"{X.shape[0]} documents x {X.shape[1]} words, {X.nnz} non-zeros (CSR)")
print("first document:", texts[0][:80], "...")

# %%
# Three clusterers on the same matrix
# -----------------------------------
# The peers at the settings a user would reach for: ``KMeans`` with ten
# k-means++ starts (``n_init=10``) and with one, and ``MiniBatchKMeans``
# with three. A matrix of fewer than 2^18 stored numbers, as this one is,
# runs NumPy's forms of the package's kernels: the first fit has nothing to
# compile (the performance page, "Cold start").

models = {
    "AttentionClustering": AttentionClustering(N_TOPICS, random_state=0),
    "KMeans(n_init=10)": KMeans(N_TOPICS, n_init=10, random_state=0),
    "KMeans(n_init=1)": KMeans(N_TOPICS, n_init=1, random_state=0),
    "MiniBatchKMeans(n_init=3)": MiniBatchKMeans(N_TOPICS, n_init=3, random_state=0),
}
labels, seconds, scores = {}, {}, {}
for name, model in models.items():
    start = time.perf_counter()
    labels[name] = model.fit_predict(X)
    seconds[name] = time.perf_counter() - start
    scores[name] = adjusted_rand_score(topics, labels[name])
    print(f"{name:26s} ARI {scores[name]:.2f}   {seconds[name]:5.2f} s")

# %%
# The words of each cluster
# -------------------------
# A cluster's top words are those of largest mean TF-IDF over its
# documents, the same rule for every clusterer. A topic's own top words
# (the same rule over the documents of that topic) are the reference: a
# cluster that is one topic has that topic's words.


def top_words(X, labels, k, n=6):
    """The ``n`` words of largest mean TF-IDF over the rows labelled ``k``."""
    mean = np.asarray(X[labels == k].mean(axis=0)).ravel()
    return [words[j] for j in np.argsort(mean)[::-1][:n]]


def matched_topic(labels, k):
    """The topic most of cluster ``k``'s documents belong to, and their share."""
    counts = np.bincount(topics[labels == k], minlength=N_TOPICS)
    return int(np.argmax(counts)), counts.max() / max(counts.sum(), 1)


for name in ("AttentionClustering", "KMeans(n_init=10)"):
    print(f"\n{name}")
    for k in range(N_TOPICS):
        topic, share = matched_topic(labels[name], k)
        print(
            f"  cluster {k}: {' '.join(top_words(X, labels[name], k)):42s}"
            f" topic {topic} ({share:.0%} of its documents)"
        )
print("\ntopics' own top words")
for t in range(N_TOPICS):
    print(f"  topic {t}: {' '.join(top_words(X, topics, t))}")

# %%
# Clusters against topics
# -----------------------
# Each panel counts the documents of each topic (rows) in each cluster
# (columns, ordered by their majority topic): one bright cell per row and
# column is a clustering that found the topics. KMeans merges some topics
# and splits others on these short documents, where the shared frequent
# words weigh on every row; the bar chart gives ARI and fit time.

fig, axes = plt.subplots(1, 3, figsize=(12, 3.8), layout="constrained")
for ax, name in zip(axes[:2], ("AttentionClustering", "KMeans(n_init=10)")):
    table = contingency_matrix(topics, labels[name])
    order = np.argsort(np.argmax(table, axis=0), kind="stable")
    ax.imshow(table[:, order], cmap="Blues")
    ax.set_title(f"{name}\nARI {scores[name]:.2f}", fontsize=10)
    ax.set_xlabel("cluster")
    ax.set_ylabel("topic")
    ax.set_xticks([])
    ax.set_yticks(range(N_TOPICS))
names = list(models)
ax = axes[2]
ax.barh(names, [scores[n] for n in names], color="C0")
for i, n in enumerate(names):
    ax.text(0.02, i, f"ARI {scores[n]:.2f}, {seconds[n]:.2f} s", va="center", color="white")
ax.set_xlim(0, 1)
ax.invert_yaxis()
ax.set_yticks(range(len(names)), [n.replace("(", "\n(") for n in names], fontsize=8)
ax.set_xlabel("ARI against the topics")
ax.set_title("agreement and fit time", fontsize=10)
plt.show()

# %%
# What to take from it
# --------------------
# On this corpus AttentionClustering recovers the topics. KMeans on the same
# TF-IDF matrix, with one start or ten, finds most topics but makes one
# cluster of the documents that the shared frequent words dominate (its top
# words are the most frequent ones, ``w0``, ``w1``, ...), which takes in
# several topics. The times above are single runs on a shared machine;
# :doc:`/user_data` times medians of interleaved rounds over the number of
# topics, the vocabulary and the document length, with spherical k-means as
# a third peer, and there AttentionClustering is slower than ``KMeans()`` on
# the smaller corpora.
