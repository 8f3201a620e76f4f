"""The extraction verdict of a window: one rule for the summary, the metrics and both reports (CBS paper §F.1.2, eq. 18).

A window is verbatim-extractable when p_z ≥ τ_min, near-verbatim only ("unlocked") when
p_z < τ_min ≤ LB_E, and not extracted otherwise. p_z is compared as log p_z ≥ log τ_min: exp()
underflows to 0 below log p_z ≈ −745 and would turn a tiny positive p_z into an impossible one.
CBS bounds are stored as probabilities and compared as they are.
"""

from __future__ import annotations

import math

import numpy as np

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
