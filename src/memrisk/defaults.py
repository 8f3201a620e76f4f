"""Every result-changing default, written once: the config, the Python API, `--help` and the docs read them here.

Values are the papers' recommended settings unless docs/departures.md says otherwise.
"""

TOP_K = 40  # the default decoding policy: top-k 40, temperature 1 (CBS paper §4, (n,p) paper §3)
TEMPERATURE = 1.0
BEAM_WIDTH = 20  # CBS beam width B (CBS paper §4)
EPSILON = 5  # near-verbatim budget ε in tokens, for CBS and greedy alike (CBS paper §4)
PRUNE = "levenshtein"  # CBS pruning distance (CBS paper Algorithm 3)
MAX_CHILDREN = 256  # children kept per beam row before the rest is banked (docs/departures.md)
TAU_MIN = 1e-3  # extraction threshold τ_min (CBS paper App. F; (n,p) paper)
PREFIX_LENGTH = 50  # window prefix a and suffix T in tokens (CBS paper §4)
SUFFIX_LENGTH = 50
STRIDE = 20
METHODS = ("probabilistic", "greedy")
PA_PREFIXES_PER_TRIAL = 5000  # prior-aware prefixes per trial c (PA paper §4)
PA_TRIALS = 5
MC_SAMPLES = (20, 100, 1000, 10000)  # Monte Carlo sample budgets, nested in one stream (CBS paper Figs. 2 and 5)
MIA_K = 0.2  # Min-K% and Min-K%++: the share of lowest-scoring suffix tokens averaged (Shi et al. 2024; Zhang et al. 2024)
MIA_BOOTSTRAP = 1000  # stratified bootstrap resamples behind each AUC and TPR interval (docs/membership.md)
MIA_CONFIDENCE = 0.95  # level of those percentile intervals
MIA_FPRS = (0.01, 0.001)  # false-positive rates at which the TPR is reported (Carlini et al. 2022's low-FPR regime)
SHARD_SIZE = 64
SHARES = 1  # CBS pools run side by side on CPU (models/shares.py); "auto": one per thread, floats may differ at rounding
PREFIX_CACHE = "auto"  # rows after one prefix read its KV cache in place ("shared") or copy it ("per_row"); "auto": shared on CPU
MATMUL = "blas"  # the CPU library of the linear layers' products: torch's own; "onednn" agrees to float32 rounding
