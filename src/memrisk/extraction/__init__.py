"""Extraction methods: greedy, probabilistic (teacher forcing) and the (n,p) maths."""
