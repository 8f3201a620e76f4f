"""Prior-aware statistics on pretrained SmolLM2: the calibration on the PA paper's generic sequences."""

from __future__ import annotations

import math

import numpy as np

import memrisk
from memrisk.data import Document
from memrisk.extraction import generic


def test_calibration_on_generic_sequences(smollm2) -> None:
    import collections
    import json

    corpus = [Document(m.__name__, m.__doc__) for m in (collections, json)]
    bank = memrisk.PrefixBank.from_documents(smollm2, corpus, length=50, size=16, seed=0)
    for name, sequences, suffix_tokens in (("long", generic.LONG, 50), ("short", generic.SHORT, 4)):
        calibration = memrisk.calibrate(smollm2, bank, suffix_length=suffix_tokens, trials=4)
        ratios = np.array(calibration.log_ratios) / math.log(10)
        print(f"SmolLM2 {name} generic set: log10 P(s|p)/prior per sequence {np.round(ratios, 2).tolist()}, "
              f"n = 10^{calibration.log_n / math.log(10):.2f} (bank of 16 stdlib-docstring windows)")
        assert calibration.sequences == sequences and np.isfinite(ratios).all()
        assert (ratios > 0).all(), "the first half of a generic sequence makes its second half likelier than random text does"
