"""Self-contained demo: a tiny model trained on a corpus with planted duplicated passages."""
