"""Report metrics on hand-made records with known answers (empty sets, all-zero masses, −inf log p)."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest

from memrisk.config import parse_config
from memrisk import rules
from memrisk.report import metrics

pytestmark = pytest.mark.filterwarnings("error")

TAU = 1e-3
LOG = math.log


def arrays(
    log_p: list[float],
    lower: list[list[float]],
    greedy_distance: list[int] | None = None,
    roles: list[str] | None = None,
) -> metrics.RunArrays:
    """RunArrays over one dataset from plain lists."""
    n = len(log_p)
    distance = np.asarray(greedy_distance if greedy_distance is not None else [0] * n, dtype=np.int64)
    return metrics.RunArrays(
        example_id=np.array([f"d/{i}" for i in range(n)], dtype=object),
        dataset=np.array(["d"] * n, dtype=object),
        role=np.array(roles or ["target"] * n, dtype=object),
        doc_id=np.array(["doc"] * n, dtype=object),
        suffix_char_start=np.arange(n, dtype=np.int64) * 10,
        char_end=np.arange(n, dtype=np.int64) * 10 + 20,
        epsilons=tuple(range(len(lower[0]) if lower else 3)),
        log_p=np.asarray(log_p, dtype=np.float64),
        policy_log_p={"topk40": np.asarray(log_p, dtype=np.float64)},
        greedy_exact=distance == 0,
        greedy_distance=distance,
        lower=np.asarray(lower, dtype=np.float64).reshape(n, -1) if lower else np.empty((0, 3)),
    )


# p_z = 0.5 (blue), 1e-4 (orange), 0 (red), 2e-3 (blue), e^-800 (underflows to 0 but is orange)
LOG_P = [LOG(0.5), LOG(1e-4), -math.inf, LOG(2e-3), -800.0]
LOWER = [
    [0.5, 0.55, 0.65],
    [1e-4, 5e-4, 2e-3],
    [0.0, 0.0, 4e-3],
    [0.0, 0.0, 0.0],
    [0.0, 1e-3, 1e-3],
]
GREEDY = [0, 2, 5, 1, 3]


def test_fraction_of_an_empty_population_is_none() -> None:
    assert rules.fraction(0, 0) is None
    assert rules.fraction(1, 4) == 0.25


def test_extraction_rates_per_method_and_epsilon() -> None:
    rates = metrics.extraction_rates(arrays(LOG_P, LOWER, GREEDY), TAU)
    assert rates["count"] == 5 and rates["epsilons"] == [0, 1, 2]
    assert rates["greedy"] == [0.2, 0.4, 0.6]
    assert rates["probabilistic"] == pytest.approx(0.4)
    assert rates["cbs"] == [0.2, 0.4, 0.8]


def test_rates_by_role_keep_controls_apart_and_empty_roles_undefined() -> None:
    roles = ["target", "target", "control", "target", "target"]
    by_role = metrics.rates_by_role(arrays(LOG_P, LOWER, GREEDY, roles), TAU)
    assert by_role["control"]["count"] == 1 and by_role["control"]["cbs"] == [0.0, 0.0, 1.0]
    assert by_role["target"]["probabilistic"] == 0.5
    only_targets = metrics.rates_by_role(arrays(LOG_P, LOWER, GREEDY), TAU)["control"]
    assert only_targets["count"] == 0
    assert only_targets["greedy"] == [None] * 3 and only_targets["cbs"] == [None] * 3 and only_targets["probabilistic"] is None


def test_methods_the_run_did_not_use_are_absent() -> None:
    a = arrays(LOG_P, LOWER)
    bare = metrics.RunArrays(a.example_id, a.dataset, a.role, a.doc_id, a.suffix_char_start, a.char_end, a.epsilons)
    assert metrics.extraction_rates(bare, TAU) == {"count": 5, "epsilons": [0, 1, 2]}
    assert metrics.policy_table(bare, TAU) == {}


def test_verdicts_verbatim_near_verbatim_and_not_extracted() -> None:
    kinds = rules.verdicts(np.array(LOG_P), np.array(LOWER)[:, -1], TAU)
    assert kinds.tolist() == ["verbatim", "near_verbatim", "near_verbatim", "verbatim", "near_verbatim"]
    assert rules.counts(np.array(LOG_P), np.array(LOWER)[:, -1], TAU) == {
        "verbatim": 2, "near_verbatim": 3, "not_extracted": 0,
        "near_verbatim_p_z_zero": 1, "near_verbatim_p_z_positive": 2, "total": 5,
    }


def test_verdicts_compare_log_p_with_log_tau() -> None:
    # p_z = e^-800 underflows to 0.0 as a float, yet it is positive: near-verbatim with 0 < p_z, never "p_z = 0"
    log_p = np.array([-800.0, -800.0, -math.inf, LOG(TAU), np.nextafter(LOG(TAU), -math.inf)])
    lower_top = np.array([0.0, TAU * (1 + 1e-12), TAU, 0.0, 0.0])
    assert rules.verdicts(log_p, lower_top, TAU).tolist() == [
        "not_extracted", "near_verbatim", "near_verbatim", "verbatim", "not_extracted",
    ]
    counts = rules.counts(log_p, lower_top, TAU)
    assert (counts["near_verbatim_p_z_zero"], counts["near_verbatim_p_z_positive"]) == (1, 1)


def test_nothing_unlocked_below_tau_and_on_empty_input() -> None:
    assert rules.verdicts(np.array([-math.inf, LOG(1e-5)]), np.array([9e-4, 0.0]), TAU).tolist() == ["not_extracted"] * 2
    assert rules.counts(np.empty(0), np.empty(0), TAU) == {
        "verbatim": 0, "near_verbatim": 0, "not_extracted": 0, "near_verbatim_p_z_zero": 0, "near_verbatim_p_z_positive": 0, "total": 0,
    }


def test_verdicts_by_epsilon_grow_with_the_ball() -> None:
    per_eps = metrics.verdicts_by_epsilon(np.array(LOG_P), np.array(LOWER), TAU)
    assert [u["near_verbatim"] for u in per_eps] == [0, 1, 3]
    assert [u["verbatim"] for u in per_eps] == [2, 2, 2]


def test_mass_gain_is_cbs_near_verbatim_minus_cbs_verbatim_mass() -> None:
    # CBS eq. 50: Δ = p̂_{z,5} − p_z with p_z "the verbatim mass from k-CBS results" (LB_0), so never negative;
    # the fourth window has a teacher-forced p_z = 2e-3 that CBS did not find (LB = 0): its gain is 0, not −2e-3
    gain = rules.mass_gain(np.array(LOWER))
    assert gain == pytest.approx([0.15, 2e-3 - 1e-4, 4e-3, 0.0, 1e-3])


def test_ccdf_curve_counts_the_whole_population() -> None:
    x, y = metrics.ccdf_curve(np.array([0.5, 0.1, 0.1, 0.0, -0.01]))
    assert x.tolist() == [0.1, 0.5]
    assert y.tolist() == [3 / 5, 1 / 5]
    x, y = metrics.ccdf_curve(np.array([0.2]), denominator=4)
    assert x.tolist() == [0.2] and y.tolist() == [0.25]


def test_ccdf_of_empty_and_all_zero_gains_is_empty() -> None:
    for values in (np.empty(0), np.zeros(4), np.array([-1.0, 0.0])):
        x, y = metrics.ccdf_curve(values)
        assert x.size == 0 and y.size == 0


def test_ccdf_points() -> None:
    values = np.array([0.5, 0.05, 0.005, 0.0005, 0.0])
    assert metrics.ccdf_at(values) == {"0.001": 0.6, "0.01": 0.4, "0.1": 0.2}
    assert metrics.ccdf_at(np.empty(0)) == {"0.001": None, "0.01": None, "0.1": None}


def test_gain_table_population_and_extracted_set() -> None:
    table = metrics.gain_table(np.array(LOWER), TAU)
    assert table["population_count"] == 5 and table["extracted_count"] == 4
    assert table["any_gain"] == 0.8
    assert table["population"] == {"0.001": 0.8, "0.01": 0.2, "0.1": 0.2}
    assert table["extracted"] == {"0.001": 1.0, "0.01": 0.25, "0.1": 0.25}


def test_shell_masses_and_shares() -> None:
    masses = rules.shell_masses(np.array(LOWER))
    assert masses[0] == pytest.approx([0.5, 0.05, 0.1])
    assert masses[2] == pytest.approx([0.0, 0.0, 4e-3])
    assert masses[3].tolist() == [0.0, 0.0, 0.0]
    shares = rules.shell_shares(np.array(LOWER), TAU)
    assert shares.shape == (4, 3)
    assert shares[0] == pytest.approx([0.5 / 0.65, 0.05 / 0.65, 0.1 / 0.65])
    assert shares[1] == pytest.approx([0.05, 0.2, 0.75])
    assert shares[2].tolist() == [0.0, 0.0, 1.0] and shares[3].tolist() == [0.0, 1.0, 0.0]
    assert metrics.medians(shares) == pytest.approx([0.05 / 2, 0.5 * (0.05 / 0.65 + 0.2), 0.5 * (0.1 / 0.65 + 0.75)])


def test_shell_zero_is_the_cbs_verbatim_mass_not_the_teacher_forced_p_z() -> None:
    # CBS eqs. 51–52: Δ(0) = p̂_{z,0}; a teacher-forced p_z = 0.3 that CBS missed must not enter the shares
    lower = np.array([[0.0, 0.2, 0.5], [0.1, 0.1, 0.4]])
    assert rules.shell_masses(lower) == pytest.approx(np.array([[0.0, 0.2, 0.3], [0.1, 0.0, 0.3]]))
    assert rules.shell_shares(lower, TAU) == pytest.approx(np.array([[0.0, 0.4, 0.6], [0.25, 0.0, 0.75]]))


def test_shell_shares_of_every_window_sum_to_one() -> None:
    rng = np.random.default_rng(0)
    scale = 10.0 ** rng.uniform(-9.0, 0.0, size=(500, 1))
    lower = np.cumsum(rng.dirichlet(np.ones(6), size=500) * rng.uniform(0.0, 1.0, size=(500, 1)), axis=1) * scale
    lower[::7, :3] = 0.0
    shares = rules.shell_shares(lower, 1e-12)
    assert shares.shape == (500, 6)
    assert np.abs(shares.sum(axis=1) - 1.0).max() <= 1e-12
    assert shares[:, 0] == pytest.approx(lower[:, 0] / lower[:, -1], rel=1e-15)


def test_shell_shares_with_all_zero_masses_are_empty() -> None:
    shares = rules.shell_shares(np.zeros((2, 6)), TAU)
    assert shares.shape == (0, 6)
    assert metrics.medians(shares) == [None] * 6
    assert rules.shell_masses(np.empty((0, 6))).shape == (0, 6)


def test_certificate_mean_gap_and_share_within_1e_3_per_epsilon() -> None:
    # CBS §E: LB_ε ≤ p_{z,ε} ≤ UB_ε; a window is certified to within 1e-3 when UB_ε − LB_ε ≤ 1e-3 (the boundary counts)
    lower = np.array([[0.0, 0.0], [0.0, 0.25], [0.5, 0.5], [0.0, 0.0]])
    upper = np.array([[0.001, 0.001], [0.5, 0.25], [0.5, 1.0], [0.0, 0.0]])
    cert = rules.certificate(lower, upper)
    assert cert["tolerance"] == 1e-3
    assert cert["mean_lower"] == pytest.approx([0.125, 0.1875]) and cert["mean_upper"] == pytest.approx([0.25025, 0.31275])
    assert cert["mean_gap"] == pytest.approx([0.12525, 0.12525])
    assert cert["certified_share"] == [0.75, 0.75]
    empty = rules.certificate(np.empty((0, 2)), np.empty((0, 2)))
    assert empty["mean_gap"] == [None, None] and empty["certified_share"] == [None, None]


def test_recovery_ratio_missed_and_extra() -> None:
    log_p = np.array([LOG(0.5), LOG(0.01), LOG(1e-4), -math.inf])
    lower_zero = np.array([0.5, 0.0, 2e-3, 0.0])
    out = rules.recovery(np.array(["a", "b", "c", "d"], dtype=object), log_p, lower_zero, TAU)
    assert out == {"teacher_forced": 2, "cbs_verbatim": 2, "ratio": 1.0, "mass_ratio": pytest.approx(0.5 / 0.51),
                   "missed": ["b"], "extra": ["c"]}
    none = rules.recovery(np.array(["a"], dtype=object), np.array([-math.inf]), np.array([0.0]), TAU)
    assert none["ratio"] is None and none["mass_ratio"] is None and none["missed"] == [] and none["teacher_forced"] == 0


def test_np_curves_with_the_greedy_line() -> None:
    curves = metrics.np_curves(np.array([0.0, -math.inf]), np.array([True, False]))
    assert curves["greedy"] == 0.5 and curves["max_rate"] == 0.5 and curves["count"] == 2
    assert all(rate == 0.5 for rates in curves["rates"].values() for rate in rates)
    empty = metrics.np_curves(np.empty(0), None)
    assert empty["count"] == 0 and empty["max_rate"] is None and empty["greedy"] is None
    assert metrics.np_curves(np.empty(0), np.empty(0, dtype=bool))["greedy"] is None


def test_np_curves_rate_rises_with_n() -> None:
    curves = metrics.np_curves(np.array([LOG(1e-3)]), None)
    rates = curves["rates"]["0.5"]
    n_half = curves["n_grid"][rates.index(1.0)]
    assert 1 - (1 - 1e-3) ** n_half >= 0.5 and rates[0] == 0.0


def test_policy_table_reuses_the_summary_statistics() -> None:
    table = metrics.policy_table(arrays(LOG_P, LOWER), TAU)
    assert table["topk40"]["extractable"] == 2 and table["topk40"]["zero_probability"] == 1


def test_coverage_max_takes_the_max_over_covering_suffixes() -> None:
    out = metrics.coverage_max(np.array([0, 2, 6, 3]), np.array([4, 5, 6, 4]), np.array([0.1, 0.5, 0.9, 0.2]), 8)
    assert out.tolist() == [0.1, 0.1, 0.5, 0.5, 0.5, 0.0, 0.0, 0.0]
    assert metrics.coverage_max(np.empty(0), np.empty(0), np.empty(0), 3).tolist() == [0.0, 0.0, 0.0]


def test_max_pool_keeps_peaks() -> None:
    assert metrics.max_pool(np.array([1.0, 5.0, 2.0, 0.0, 3.0]), 2).tolist() == [5.0, 3.0]
    assert metrics.max_pool(np.array([1.0, 2.0]), 10).tolist() == [1.0, 2.0]


def test_book_heatmaps_per_document_verbatim_and_near_verbatim() -> None:
    a = arrays(LOG_P, LOWER)
    a = metrics.RunArrays(**{**a.__dict__, "doc_id": np.array(["y", "y", "x", "x", "y"], dtype=object)})
    y, x = metrics.book_heatmaps(a)
    assert (y.doc_id, y.windows, x.doc_id, x.windows) == ("y", 3, "x", 2)
    assert y.verbatim.size == 60 and x.verbatim.size == 50
    expected = {0: 0.5, 15: 0.5, 25: 1e-4, 35: 0.0, 45: 0.0}
    assert {i: y.verbatim[i] for i in expected} == pytest.approx(expected)
    assert {i: y.near_verbatim[i] for i in expected} == pytest.approx({0: 0.65, 15: 0.65, 25: 2e-3, 35: 0.0, 45: 1e-3})
    assert x.verbatim[:20].tolist() == [0.0] * 20 and x.verbatim[25] == 0.0 and x.verbatim[35] == pytest.approx(2e-3)
    assert x.near_verbatim[25] == 4e-3 and x.near_verbatim[45] == 0.0


def test_book_heatmaps_of_nothing() -> None:
    assert metrics.book_heatmaps(arrays([], [])) == []


CONFIG = {
    "model": {"name": "m"},
    "datasets": [{"name": "d", "documents": ["x"]}],
    "policies": [{"top_k": 40}, {"name": "full"}],
    "methods": ["probabilistic", "greedy", "cbs"],
    "cbs": {"epsilon": 2, "policy": "full"},
}


def test_run_arrays_from_a_records_table() -> None:
    table = pa.Table.from_pylist([
        {"example_id": "d/a@0", "dataset": "d", "role": "target", "doc_id": "a", "suffix_char_start": 5, "char_end": 9,
         "log_p.topk40": -math.inf, "log_p.full": -2.0, "greedy_exact": False, "greedy_levenshtein": 2, "greedy_hamming": 3,
         "cbs_lower.levenshtein": [0.1, 0.2, 0.3], "cbs_lower.hamming": [0.1, 0.1, 0.1],
         "cbs_upper.levenshtein": [0.5, 0.5, 0.5], "cbs_upper.hamming": [0.9, 0.9, 0.9]},
        {"example_id": "d/a@9", "dataset": "d", "role": "target", "doc_id": "a", "suffix_char_start": 12, "char_end": 20,
         "log_p.topk40": -1.0, "log_p.full": -1.5, "greedy_exact": True, "greedy_levenshtein": 0, "greedy_hamming": 0,
         "cbs_lower.levenshtein": [0.0, 0.0, 0.5], "cbs_lower.hamming": [0.0, 0.0, 0.0],
         "cbs_upper.levenshtein": [0.6, 0.6, 0.6], "cbs_upper.hamming": [1.0, 1.0, 1.0]},
    ])
    a = metrics.run_arrays(table, parse_config(CONFIG))
    assert a.count == 2 and a.epsilons == (0, 1, 2)
    assert a.log_p.tolist() == [-2.0, -1.5]
    assert a.policy_log_p["topk40"][0] == -math.inf
    assert a.greedy_distance.tolist() == [2, 0] and a.greedy_exact.tolist() == [False, True]
    assert a.lower.tolist() == [[0.1, 0.2, 0.3], [0.0, 0.0, 0.5]] and a.upper.tolist() == [[0.5] * 3, [0.6] * 3]
    assert a.char_end.tolist() == [9, 20]
    hamming = metrics.run_arrays(table, parse_config(CONFIG | {"cbs": {"epsilon": 2, "prune": "hamming"}}))
    assert hamming.lower.tolist() == [[0.1, 0.1, 0.1], [0.0, 0.0, 0.0]] and hamming.greedy_distance.tolist() == [3, 0]
    assert hamming.upper.tolist() == [[0.9] * 3, [1.0] * 3]


def test_run_arrays_of_a_run_without_records() -> None:
    a = metrics.run_arrays(pa.table({}), parse_config(CONFIG))
    assert a.count == 0 and a.lower.shape == (0, 3) and a.log_p.size == 0
    assert metrics.extraction_rates(a, TAU)["cbs"] == [None, None, None]
    assert metrics.gain_table(a.lower, TAU)["any_gain"] is None
    assert rules.shell_shares(a.lower, TAU).shape == (0, 3)


def test_run_arrays_skip_methods_not_configured() -> None:
    table = pa.Table.from_pylist([
        {"example_id": "d/a@0", "dataset": "d", "role": "target", "doc_id": "a", "suffix_char_start": 0, "char_end": 3,
         "log_p.topk40": -1.0},
    ])
    probabilistic_only = {"model": {"name": "m"}, "datasets": [{"name": "d", "documents": ["x"]}], "methods": ["probabilistic"]}
    a = metrics.run_arrays(table, parse_config(probabilistic_only))
    assert a.greedy_exact is None and a.lower is None and a.log_p.tolist() == [-1.0]
