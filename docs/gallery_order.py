"""The order of the gallery: the tasks users bring first, then the paper.

sphinx-gallery's ``within_subsection_order`` takes this function by its
qualified name (a string keeps the configuration picklable).
"""

import os

# The examples a user starts from, in reading order; the reproductions of
# the paper's figures follow, by file name.
TASKS = (
    "plot_quickstart.py",
    "plot_which_one_when.py",
    "plot_text_clustering.py",
    "plot_embeddings.py",
    "plot_choose_k.py",
    "plot_streaming.py",
    "plot_dask.py",
    "plot_model_assumptions.py",
)


def tasks_first(filename):
    """Sort key: the position in TASKS, else after them by file name."""
    name = os.path.basename(filename)
    return (TASKS.index(name), "") if name in TASKS else (len(TASKS), name)
