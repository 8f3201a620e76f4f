"""Unit tests of memrisk.config: validation, error messages, path resolution, identity and defaults."""

from __future__ import annotations

import json
import typing

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from memrisk.config import (
    CBSConfig,
    DatasetConfig,
    ExperimentConfig,
    ModelConfig,
    PolicyConfig,
    PriorAwareConfig,
    RayConfig,
    WindowConfig,
    _model_at,
    _suggestion,
    defaults_text,
    load_config,
    parse_config,
    read_yaml_mapping,
    validated,
)
from memrisk.errors import MemriskError
from memrisk.models import linears, shared_prefix

BASE = {"model": {"name": "m"}, "datasets": [{"name": "d", "documents": ["x"]}]}
SETTINGS_CLASSES = (ModelConfig, DatasetConfig, WindowConfig, PolicyConfig, CBSConfig, PriorAwareConfig, RayConfig, ExperimentConfig)


def error_of(data, base_dir=None) -> str:
    """The message parse_config raises for `data` (fails the test when it validates)."""
    with pytest.raises(MemriskError) as info:
        parse_config(data, base_dir)
    return str(info.value)


# --- defaults -------------------------------------------------------------------------------


def test_a_minimal_config_gets_the_documented_defaults():
    """Window, policy, method and CBS defaults as the class docstrings and defaults_text state them."""
    config = parse_config(BASE)
    assert (config.windows.mode, config.windows.prefix_length, config.windows.suffix_length, config.windows.stride) == ("doc", 50, 50, 20)
    assert [p.label for p in config.policies] == ["topk40"]
    assert config.methods == ["probabilistic", "greedy"]
    assert (config.cbs.beam_width, config.cbs.prune, config.cbs.epsilon, config.cbs.anchor) == (20, "levenshtein", 5, True)
    assert (config.tau_min, config.shard_size, config.model.batch_size) == (1e-3, 64, 8)
    assert config.prior_aware.n == "calibrate" and config.prior_aware.m is None


def test_the_model_settings_offer_exactly_the_values_their_owners_accept():
    """`matmul` and `prefix_cache` are listed twice, as the config's choices (the config layer does not import the models
    layer) and as the tuples their owners check: the two lists may not drift apart."""
    fields = ModelConfig.model_fields
    assert typing.get_args(fields["matmul"].annotation) == linears.MATMUL_LIBRARIES
    assert typing.get_args(fields["prefix_cache"].annotation) == shared_prefix.PREFIX_CACHES


def test_defaults_text_lists_the_result_changing_defaults_exactly():
    """Each value read off the class defaults above (tau_min 1e-3 prints as 0.001)."""
    assert defaults_text() == "\n".join([
        "defaults (every one can be set in the YAML; the resolved config.yaml of a run lists them all):",
        "  policies: topk40; methods: probabilistic, greedy",
        "  windows: mode doc, prefix_length 50, suffix_length 50, stride 20",
        "  cbs: beam_width 20, prune levenshtein, epsilon 5, anchor True, tau_min_stop True, text_metrics False (CBS paper §4)",
        "  tau_min 0.001 (CBS paper App. F, (n,p) paper)",
        "  prior_aware: prefixes_per_trial 5000, trials 5, exclude_own_document True, n calibrate (PA paper §4)",
    ])


def test_a_parsed_config_is_frozen():
    config = parse_config(BASE)
    with pytest.raises(ValidationError, match="frozen"):
        config.tau_min = 0.5


@pytest.mark.parametrize(("settings", "label"), [
    ({}, "full"),
    ({"top_k": 40}, "topk40"),
    ({"temperature": 0.7, "top_p": 0.9}, "temp0.7-topp0.9"),
    ({"top_p": 1.0}, "full"),  # top_p 1 keeps everything: no nucleus in the name
    ({"top_k": 1, "temperature": 2.0}, "greedy"),  # top-k 1 is greedy whatever the temperature
    ({"name": "mine", "top_k": 40}, "mine"),
])
def test_policy_label_is_its_name_else_the_policy_short_name(settings, label):
    assert PolicyConfig(**settings).label == label


@pytest.mark.parametrize(("prune", "mode"), [("none", None), ("hamming", "hamming"), ("levenshtein", "levenshtein")])
def test_cbs_prune_mode_maps_none_to_no_pruning(prune, mode):
    assert CBSConfig(prune=prune).prune_mode == mode


# --- validated and the error messages --------------------------------------------------------


def test_validated_returns_the_model_on_valid_data():
    assert validated(WindowConfig, {"stride": 3}, "windows") == WindowConfig(stride=3)


def test_validated_names_every_problem_in_one_error_in_field_order():
    """suffix_length is declared before stride, so its problem comes first; the chained
    pydantic error is suppressed so the CLI shows one line."""
    with pytest.raises(MemriskError) as info:
        validated(WindowConfig, {"stride": 0, "suffix_length": 0}, "windows")
    assert str(info.value) == (
        "invalid windows: suffix_length: Input should be greater than or equal to 1; "
        "stride: Input should be greater than or equal to 1"
    )
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_a_model_level_problem_is_located_at_config():
    with pytest.raises(MemriskError) as info:
        validated(DatasetConfig, {"name": "d", "path": "a.txt", "documents": ["x"]}, "dataset")
    assert str(info.value) == "invalid dataset: config: dataset 'd' needs exactly one of 'path', 'documents' or 'hf' (got path and documents)"


@pytest.mark.parametrize(("data", "message"), [
    (BASE | {"windows": {"mode": "chapter"}}, "windows.mode: Input should be 'doc' or 'book', got 'chapter'"),
    (BASE | {"windows": {"prefix_length": "ten"}},
     "windows.prefix_length: Input should be a valid integer, unable to parse string as an integer, got 'ten'"),
    (BASE | {"prior_aware": {"bank_datasets": [1]}}, "prior_aware.bank_datasets.0: Input should be a valid string, got 1"),
    # bound errors show no input: the bound says it all
    (BASE | {"prior_aware": {"m": 1.0}}, "prior_aware.m: Input should be less than 1"),
    (BASE | {"datasets": []}, "datasets: List should have at least 1 item after validation, not 0"),
    ({"datasets": BASE["datasets"]}, "model: Field required"),
    (BASE | {"datasets": [{"name": "my data", "documents": ["x"]}]},
     "datasets.0.name: String should match pattern '^[A-Za-z0-9_.+-]+$'"),
    (BASE | {"datasets": [{"name": "e"}]}, "datasets.0: dataset 'e' needs exactly one of 'path', 'documents' or 'hf'"),
    (BASE | {"prior_aware": {"n": -1}}, "prior_aware.n: n must be >= 0 or 'calibrate', got -1.0"),  # n is parsed as a float first
])
def test_problem_messages_name_the_dotted_location(data, message):
    assert error_of(data) == f"invalid config: {message}"


def test_a_long_wrong_input_is_cut_to_40_characters():
    """repr of 50 x's is 52 characters: its first 37 ("'" and 36 x's) and '...' are shown."""
    assert error_of(BASE | {"windows": {"mode": "x" * 50}}).endswith(", got '" + "x" * 36 + "...")


def test_a_union_field_reports_each_alternative():
    """n is float | 'calibrate': both alternatives fail and both are named, with the union tag."""
    assert error_of(BASE | {"prior_aware": {"n": "x"}}) == (
        "invalid config: prior_aware.n.float: Input should be a valid number, unable to parse string as a number, got 'x'; "
        "prior_aware.n.literal['calibrate']: Input should be 'calibrate', got 'x'"
    )


# --- unknown keys and suggestions ------------------------------------------------------------


@pytest.mark.parametrize(("data", "message"), [
    (BASE | {"Model": {}}, "Model: unknown key, did you mean 'model'?"),
    (BASE | {"model": {"name": "m", "nmae": "x"}}, "model.nmae: unknown key, did you mean 'name'?"),
    (BASE | {"prior_aware": {"bank_dataset": ["d"]}}, "prior_aware.bank_dataset: unknown key, did you mean 'bank_datasets'?"),
    (BASE | {"ray": {"worker": 2}}, "ray.worker: unknown key, did you mean 'workers'?"),
    (BASE | {"datasets": [{"name": "d", "documents": ["x"]}, {"name": "e", "pth": "x"}]},
     "datasets.1.pth: unknown key, did you mean 'path'?"),
    (BASE | {"windows": {"zzz": 1}}, "windows.zzz: unknown key (allowed: mode, prefix_length, suffix_length, stride, limit)"),
])
def test_unknown_keys_are_named_with_the_closest_allowed_key(data, message):
    assert error_of(data) == f"invalid config: {message}"


def test_a_key_missing_one_letter_suggests_that_key_unless_another_is_as_close():
    """Every settings class, every key, every one-character deletion: when the variant comes
    from exactly one allowed key, that key is the suggestion (e.g. 'top_' could be top_k or
    top_p, so it is skipped)."""
    checked = 0
    for model in SETTINGS_CLASSES:
        keys = list(model.model_fields)
        for key in keys:
            for i in range(len(key)):
                variant = key[:i] + key[i + 1:]
                sources = [k for k in keys if any(k[:j] + k[j + 1:] == variant for j in range(len(k)))]
                if variant and sources == [key]:
                    assert _suggestion(variant, model) == f", did you mean {key!r}?", (model.__name__, variant)
                    checked += 1
    assert checked > 300


def test_model_at_steps_over_list_indexes_and_stops_at_plain_fields():
    assert _model_at(ExperimentConfig, ("datasets", 0)) is DatasetConfig
    assert _model_at(ExperimentConfig, ("cbs",)) is CBSConfig
    assert _model_at(ExperimentConfig, ()) is ExperimentConfig
    assert _model_at(ExperimentConfig, ("tau_min",)) is None
    assert _suggestion("x", None) == ""


# --- batch_size --------------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["batch_size", "shares"])
@given(n=st.integers(min_value=-10**6, max_value=10**6))
def test_batch_size_and_shares_accept_exactly_the_positive_integers(field, n):
    if n >= 1:
        assert getattr(ModelConfig(name="m", **{field: n}), field) == n
    else:
        with pytest.raises(ValidationError, match=f"{field} must be a positive integer or 'auto', got {n}"):
            ModelConfig(name="m", **{field: n})


@pytest.mark.parametrize("field", ["batch_size", "shares"])
@pytest.mark.parametrize("value", [True, 8.0, "8", "big", None])
def test_batch_size_and_shares_refuse_look_alikes_of_integers(field, value):
    """True == 1 and 8.0 == 8, but neither is an int: refused, not coerced."""
    assert error_of(BASE | {"model": {"name": "m", field: value}}) == (
        f"invalid config: model.{field}: {field} must be a positive integer or 'auto', got {value!r}"
    )


@pytest.mark.parametrize("field", ["batch_size", "shares"])
def test_batch_size_and_shares_auto_are_accepted(field):
    assert getattr(parse_config(BASE | {"model": {"name": "m", field: "auto"}}).model, field) == "auto"


def test_cbs_runs_in_one_pool_unless_shares_are_asked_for():
    assert parse_config(BASE).model.shares == 1


# --- cross-field rules -----------------------------------------------------------------------


def test_dataset_names_must_be_unique():
    datasets = [{"name": n, "documents": ["x"]} for n in ("a", "b", "a")]
    assert error_of(BASE | {"datasets": datasets}) == "invalid config: datasets: dataset names must be unique, got ['a', 'b', 'a']"


def test_policy_labels_must_be_unique_including_default_names():
    """A policy named 'greedy' collides with an unnamed top_k 1 policy (whose label is 'greedy')."""
    assert error_of(BASE | {"policies": [{"top_k": 40}, {"top_k": 40}]}) == (
        "invalid config: policies: policy names must be unique, got ['topk40', 'topk40']"
    )
    assert error_of(BASE | {"policies": [{"name": "greedy", "top_k": 40}, {"top_k": 1}]}) == (
        "invalid config: policies: policy names must be unique, got ['greedy', 'greedy']"
    )
    same_settings = parse_config(BASE | {"policies": [{"name": "a", "top_k": 40}, {"name": "b", "top_k": 40}]})
    assert [p.label for p in same_settings.policies] == ["a", "b"]


def test_an_invalid_policy_is_refused_with_the_policy_message():
    assert error_of(BASE | {"policies": [{"top_p": 1.5}]}) == "invalid config: policies: top_p must be in (0, 1] (or None), got 1.5"


def test_cbs_policy_must_name_a_configured_policy():
    assert error_of(BASE | {"cbs": {"policy": "greedy"}}) == (
        "invalid config: config: cbs.policy 'greedy' is not one of the policies ['topk40']"
    )


def test_cbs_policy_is_the_named_one_else_the_first():
    policies = [{"top_k": 40}, {"top_k": 1}]
    assert parse_config(BASE | {"policies": policies}).cbs_policy().label == "topk40"
    chosen = parse_config(BASE | {"policies": policies, "cbs": {"policy": "greedy"}}).cbs_policy()
    assert chosen == PolicyConfig(top_k=1)


def test_bank_datasets_must_be_datasets_of_the_config():
    """Only the unknown names are listed, in the order given."""
    assert error_of(BASE | {"prior_aware": {"bank_datasets": ["f", "d", "e"]}}) == (
        "invalid config: config: prior_aware.bank_datasets ['f', 'e'] are not datasets of this config ['d']"
    )
    assert parse_config(BASE | {"prior_aware": {"bank_datasets": ["d"]}}).prior_aware.bank_datasets == ["d"]


# --- paths ---------------------------------------------------------------------------------


def test_relative_dataset_paths_are_resolved_against_base_dir(tmp_path):
    base = tmp_path.resolve()
    datasets = [
        {"name": "rel", "path": "data/a.txt"},
        {"name": "up", "path": "../b.txt"},
        {"name": "abs", "path": "/nowhere/c.txt"},
        {"name": "inline", "documents": ["x"]},
    ]
    config = parse_config(BASE | {"datasets": datasets}, base / "sub")
    assert [d.path for d in config.datasets] == [f"{base}/sub/data/a.txt", f"{base}/b.txt", "/nowhere/c.txt", None]
    assert config.datasets[3].documents == ["x"]


def test_without_base_dir_paths_are_kept_as_written():
    config = parse_config(BASE | {"datasets": [{"name": "rel", "path": "data/a.txt"}]})
    assert config.datasets[0].path == "data/a.txt"


def test_load_config_resolves_paths_against_the_file_folder(tmp_path, monkeypatch):
    base = tmp_path.resolve()
    (base / "sub").mkdir()
    text = "model: {name: m}\ndatasets:\n  - {name: d, path: story.txt}\n"
    (base / "sub" / "exp.yaml").write_text(text, encoding="utf-8")
    assert load_config(base / "sub" / "exp.yaml").datasets[0].path == f"{base}/sub/story.txt"
    monkeypatch.chdir(base / "sub")  # a bare file name: its folder is the working folder
    assert load_config("exp.yaml").datasets[0].path == f"{base}/sub/story.txt"


# --- read_yaml_mapping -----------------------------------------------------------------------


def test_read_yaml_mapping_returns_the_mapping(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("a: 1\nb: [x, y]\n", encoding="utf-8")
    assert read_yaml_mapping(path, "a, b") == {"a": 1, "b": ["x", "y"]}


@pytest.mark.parametrize("text", ["", "just a string\n", "- a\n- b\n", "42\n"])
def test_read_yaml_mapping_names_the_expected_settings_when_the_file_holds_no_mapping(tmp_path, text):
    """An empty file loads as None, the others as a str, a list and an int: none is a mapping."""
    path = tmp_path / "c.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(MemriskError) as info:
        read_yaml_mapping(path, "books, model")
    assert str(info.value) == f"{path} must hold a mapping of settings (books, model, ...)"


def test_read_yaml_mapping_names_line_and_column_of_a_syntax_error(tmp_path):
    """In "  b: 2" under the scalar 'a: 1' a mapping cannot start; the ':' is the 4th character of line 2."""
    path = tmp_path / "c.yaml"
    path.write_text("a: 1\n  b: 2\n", encoding="utf-8")
    with pytest.raises(MemriskError) as info:
        read_yaml_mapping(path, "a")
    assert str(info.value) == f"{path} is not valid YAML: mapping values are not allowed here (line 2, column 4)"


def test_read_yaml_mapping_gives_the_first_line_of_an_error_without_a_mark(tmp_path):
    """A control character is refused by YAML's reader, whose error has no problem mark."""
    path = tmp_path / "c.yaml"
    path.write_text("a: \x07\n", encoding="utf-8")
    with pytest.raises(MemriskError) as info:
        read_yaml_mapping(path, "a")
    assert str(info.value) == f"{path} is not valid YAML: unacceptable character #x0007: special characters are not allowed"


def test_read_yaml_mapping_names_the_first_byte_that_is_not_utf8(tmp_path):
    """b'a: ' is 3 bytes, so the Latin-1 byte 0xe9 is at offset 3."""
    path = tmp_path / "c.yaml"
    path.write_bytes(b"a: \xe9\n")
    with pytest.raises(MemriskError) as info:
        read_yaml_mapping(path, "a")
    assert str(info.value) == f"{path} is not UTF-8 text (byte 3)"


def test_read_yaml_mapping_missing_file_and_folder(tmp_path):
    with pytest.raises(MemriskError) as missing:
        read_yaml_mapping(tmp_path / "absent.yaml", "a")
    assert str(missing.value) == f"config file not found: {tmp_path / 'absent.yaml'}"
    with pytest.raises(MemriskError) as folder:
        read_yaml_mapping(tmp_path, "a")
    assert str(folder.value) == f"config {tmp_path} is a folder, not a YAML file"


# --- identity ------------------------------------------------------------------------------


def test_identity_leaves_out_exactly_the_settings_that_do_not_change_results():
    identity = parse_config(BASE).identity()
    assert set(identity) == {"model", "datasets", "windows", "policies", "methods", "cbs", "mc", "prior_aware", "tau_min"}
    assert set(identity["model"]) == {"name", "revision", "dtype", "device", "gguf_file", "attention"}
    assert json.loads(json.dumps(identity)) == identity  # JSON-ready, as it is stored in the manifest


def test_identity_is_equal_across_placement_and_batching_and_differs_on_results_settings():
    plain = parse_config(BASE).identity()
    placed = parse_config(BASE | {
        "model": {"name": "m", "batch_size": 1, "compile": True, "device_map": "auto", "threads": 3, "matmul": "onednn",
                  "prefix_cache": "per_row"},
        "shard_size": 7, "ray": {"workers": 4},
    }).identity()
    assert placed == plain
    assert parse_config(BASE | {"tau_min": 0.01}).identity() != plain
    assert parse_config(BASE | {"model": {"name": "m", "dtype": "float32"}}).identity() != plain
