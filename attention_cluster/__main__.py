"""``python -m attention_cluster``: the demonstration table (see ``_demo.py``)."""

if __name__ == "__main__":
    from ._demo import main

    main()
