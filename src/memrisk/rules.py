"""The rules every number of a run is judged by, written once: the summary, the metrics, both
reports and the studies call them (CBS paper §F.1.2, eqs. 18 and 50–53; arrays in, arrays out).

A window is verbatim-extractable when p_z ≥ τ_min, near-verbatim only ("unlocked") when
p_z < τ_min ≤ LB_E, and not extracted otherwise. p_z is compared as log p_z ≥ log τ_min: exp()
underflows to 0 below log p_z ≈ −745 and would turn a tiny positive p_z into an impossible one.
CBS bounds are stored as probabilities and compared as they are.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

CERTIFIED_GAP = 1e-3
VERBATIM, NEAR_VERBATIM, NOT_EXTRACTED = "verbatim", "near_verbatim", "not_extracted"
VERDICTS = (VERBATIM, NEAR_VERBATIM, NOT_EXTRACTED)
LABELS = {VERBATIM: "verbatim", NEAR_VERBATIM: "near-verbatim only", NOT_EXTRACTED: "not extracted"}


def verbatim(log_p: np.ndarray, tau: float) -> np.ndarray:
    """p_z ≥ τ_min (CBS eq. 18 at ε = 0), as log p_z ≥ log τ_min."""
    return np.asarray(log_p, dtype=np.float64) >= math.log(tau)


def cbs_extracted(mass: np.ndarray, tau: float) -> np.ndarray:
    """A CBS mass (LB_ε, or a text-metric mass) ≥ τ_min: extraction certified by the lower bound (CBS eq. 18)."""
    return np.asarray(mass, dtype=np.float64) >= tau


def zero_probability(log_p: np.ndarray) -> np.ndarray:
    """p_z = 0 exactly (log p_z = −inf: the policy cannot emit the suffix), the paper's red points; e^−800 is not zero."""
    return np.isneginf(np.asarray(log_p, dtype=np.float64))


def verdicts(log_p: np.ndarray, lower_top: np.ndarray, tau: float) -> np.ndarray:
    """Per window VERBATIM (p_z ≥ τ), NEAR_VERBATIM (p_z < τ ≤ LB_E) or NOT_EXTRACTED (CBS §F.1.2)."""
    return np.select([verbatim(log_p, tau), cbs_extracted(lower_top, tau)], [VERBATIM, NEAR_VERBATIM], NOT_EXTRACTED)


def counts(log_p: np.ndarray, lower_top: np.ndarray, tau: float) -> dict[str, int]:
    """Windows per verdict; the near-verbatim-only ones split by p_z = 0 (red) and 0 < p_z < τ (orange), CBS §F.1.2."""
    kind = verdicts(log_p, lower_top, tau)
    out = {name: int((kind == name).sum()) for name in VERDICTS}
    zero = int(((kind == NEAR_VERBATIM) & zero_probability(log_p)).sum())
    return out | {"near_verbatim_p_z_zero": zero, "near_verbatim_p_z_positive": out[NEAR_VERBATIM] - zero, "total": int(kind.size)}


def fraction(count: int, total: int) -> float | None:
    """count / total, or None for an empty population (never NaN)."""
    return count / total if total else None


def cbs_distance(prune_mode: str | None) -> str:
    """The distance CBS results are judged by: the one the search pruned with, Levenshtein when unpruned."""
    return prune_mode or "levenshtein"


def near_verbatim_epsilons(epsilon: int) -> range:
    """The budgets ε = 0..E every near-verbatim rate is given at (greedy and CBS alike; E from the config)."""
    return range(epsilon + 1)


def within(distance: np.ndarray, epsilon: int) -> np.ndarray:
    """A greedy continuation at token distance ≤ ε from the suffix: near-verbatim extracted (CBS §F.1)."""
    return np.asarray(distance) <= epsilon


def recovery(example_id: np.ndarray, log_p: np.ndarray, lower_zero: np.ndarray, tau: float) -> dict[str, Any]:
    """CBS verbatim (LB_0 ≥ τ) against teacher forcing (p_z ≥ τ), CBS Table 6: counts, ratio, mass ratio, missed and extra ids."""
    forced, found = verbatim(log_p, tau), cbs_extracted(lower_zero, tau)
    mass = float(np.asarray(lower_zero)[forced].sum() / np.exp(log_p[forced]).sum()) if forced.any() else None
    return {
        "teacher_forced": int(forced.sum()),
        "cbs_verbatim": int(found.sum()),
        "ratio": float(found.sum() / forced.sum()) if forced.any() else None,
        "mass_ratio": mass,
        "missed": [str(x) for x in example_id[forced & ~found]],
        "extra": [str(x) for x in example_id[found & ~forced]],
    }


def certificate(lower: np.ndarray, upper: np.ndarray) -> dict[str, Any]:
    """Per ε (list index): mean LB_ε, mean UB_ε, mean UB_ε − LB_ε and the share of windows certified to within
    CERTIFIED_GAP, UB_ε − LB_ε ≤ 1e-3 (CBS §E: LB_ε ≤ p_{z,ε} ≤ UB_ε); None for no windows."""
    lower, upper = np.asarray(lower, dtype=np.float64), np.asarray(upper, dtype=np.float64)
    gap = upper - lower

    def means(values: np.ndarray) -> list[float | None]:
        return values.mean(axis=0).tolist() if values.shape[0] else [None] * values.shape[1]

    return {"tolerance": CERTIFIED_GAP, "mean_lower": means(lower), "mean_upper": means(upper), "mean_gap": means(gap),
            "certified_share": means((gap <= CERTIFIED_GAP).astype(np.float64))}


def mass_gain(lower: np.ndarray) -> np.ndarray:
    """Δ = LB_E − LB_0 per sequence (CBS eq. 50): near-verbatim minus verbatim mass, both CBS's own."""
    lower = np.asarray(lower, dtype=np.float64)
    return lower[:, -1] - lower[:, 0]


def shell_masses(lower: np.ndarray) -> np.ndarray:
    """Δ(ε) per sequence (CBS eq. 51): column 0 is LB_0 (CBS's verbatim mass), column ε ≥ 1 is LB_ε − LB_{ε−1}."""
    return np.diff(np.asarray(lower, dtype=np.float64), axis=1, prepend=0.0)


def shell_shares(lower: np.ndarray, tau: float) -> np.ndarray:
    """Δ(ε) / LB_E for the extracted sequences, LB_E ≥ τ (CBS eq. 52); each row sums to 1, column 0 is the verbatim share (eq. 53)."""
    lower = np.asarray(lower, dtype=np.float64)
    extracted = lower[cbs_extracted(lower[:, -1], tau)]
    return shell_masses(extracted) / extracted[:, -1:]
