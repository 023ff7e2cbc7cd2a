"""Recipes: loading, `extends`, dotted overrides, validation errors that name the key."""

from __future__ import annotations

import pytest
import yaml

from titans_seq.training import ConfigError, from_dict, get_task, list_tasks, load_config
from titans_seq.training.config import config_changes, parse_override
from titans_seq.training.recipe_files import builtin_recipe_path, list_recipes


def test_every_shipped_recipe_loads_and_validates():
    names = list_recipes()
    assert {
        "synthetic/associative_recall_lmm",
        "synthetic/associative_recall_mag",
        "synthetic/associative_recall_swa",
        "synthetic/tiny",
    } <= set(names)
    for name in names:
        cfg = load_config(name)
        assert cfg.name == name
        assert cfg.task in list_tasks()
        # the resolved config is itself a valid recipe that reproduces the same config
        assert from_dict(yaml.safe_load(cfg.to_yaml())) == cfg
        if cfg.search_space:
            from titans_seq.tuning import load_search_space

            assert load_search_space(cfg.to_dict(), None)


def test_builtin_names_resolve_by_path_or_unique_stem():
    assert builtin_recipe_path("synthetic/associative_recall_lmm").is_file()
    assert builtin_recipe_path("associative_recall_lmm") == builtin_recipe_path(
        "synthetic/associative_recall_lmm.yaml"
    )
    assert not any(n.rsplit("/", 1)[-1].startswith("_") for n in list_recipes())
    with pytest.raises(ConfigError, match="neither an existing file nor a built-in recipe"):
        builtin_recipe_path("no_such_recipe")


def test_variants_inherit_the_base_and_override_the_mixer():
    lmm = load_config("synthetic/associative_recall_lmm")
    swa = load_config("synthetic/associative_recall_swa")
    assert (lmm.model.mixer, swa.model.mixer) == ("lmm", "swa")
    assert lmm.data == swa.data and lmm.optim == swa.optim
    assert swa.model.mixer_options == {"window": 64}


def test_dotted_overrides_are_typed_and_validated():
    cfg = load_config(
        "synthetic/associative_recall_lmm",
        [
            "optim.lr=3e-4",
            "model.mixer=mag",
            "optim.betas=[0.8, 0.9]",
            "optim.grad_clip=null",
            "model.mixer_options.memory.chunk_size=8",
        ],
    )
    assert cfg.optim.lr == pytest.approx(3e-4)  # YAML reads 3e-4 as a string: converted
    assert cfg.model.mixer == "mag"
    assert cfg.optim.betas == (0.8, 0.9)
    assert cfg.optim.grad_clip is None
    assert cfg.model.mixer_options["memory"] == {"chunk_size": 8, "depth": 2}
    assert parse_override("train.max_steps=10") == ("train.max_steps", 10)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("optim.lrr=1", "unknown key 'optim.lrr'; did you mean 'optim.lr'"),
        ("model.dimm=3", "unknown key 'model.dimm'; did you mean 'model.dim'"),
        ("trian.max_steps=3", "unknown key 'trian'; did you mean 'train'"),
        ("train.max_steps=1.5", "train.max_steps: expected an integer, got 1.5"),
        ("train.max_steps=true", "train.max_steps: expected an integer"),
        ("optim.lr=fast", "optim.lr: expected a number, got 'fast'"),
        ("eval.mode=up", "eval.mode: expected one of \\['min', 'max'\\], got 'up'"),
        ("optim.betas=[0.9]", "optim.betas: expected 2 values"),
        ("train.deterministic=3", "train.deterministic: expected true/false"),
        ("data.num_queries=x", "data.num_queries: expected int or null"),
        ("train.batch_size=0", "train.batch_size must be a positive integer"),
        ("train.grad_accum=3", "divisible by train.grad_accum"),
        ("optim.lr.x=1", "'optim.lr' is a value, not a section"),
        ("task=nope", "task: unknown task 'nope'"),
    ],
)
def test_bad_values_raise_errors_naming_the_key(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config("synthetic/associative_recall_lmm", [override])


def test_malformed_override_and_recipe_files(tmp_path):
    with pytest.raises(ConfigError, match="must look like section.key=value"):
        load_config("synthetic/associative_recall_lmm", ["optim.lr"])
    bad = tmp_path / "bad.yaml"
    bad.write_text("task: [unclosed\n")
    with pytest.raises(ConfigError, match="bad.yaml is not valid YAML"):
        load_config(bad)
    bad.write_text("- a list\n")
    with pytest.raises(ConfigError, match="must be a mapping of sections"):
        load_config(bad)
    loop = tmp_path / "loop.yaml"
    loop.write_text("extends: loop.yaml\n")
    with pytest.raises(ConfigError, match="chain loops"):
        load_config(loop)


def test_recipe_file_extending_a_builtin(tmp_path):
    mine = tmp_path / "mine.yaml"
    mine.write_text("extends: synthetic/associative_recall_lmm\ntrain:\n  max_steps: 7\n")
    cfg = load_config(mine)
    assert cfg.name == "mine" and cfg.train.max_steps == 7 and cfg.model.mixer == "lmm"
    assert cfg.run_dir().as_posix() == "runs/mine"


def test_task_registry_resolves_import_paths_once(tiny):
    cfg = from_dict(tiny())
    task = get_task(cfg.task)
    assert get_task(cfg.task) is task
    with pytest.raises(ValueError, match="cannot import"):
        get_task("no_such_module_xyz:Task")


def test_extends_merges_mappings_but_an_empty_mapping_clears_them(tmp_path):
    (tmp_path / "base.yaml").write_text(
        "extends: synthetic/associative_recall_lmm\n"
        "model:\n  mixer_options: {memory: {chunk_size: 8}}\n"
    )
    merged = tmp_path / "merged.yaml"
    merged.write_text("extends: base.yaml\nmodel:\n  mixer_options: {num_persistent: 0}\n")
    options = load_config(merged).model.mixer_options
    assert options["memory"]["chunk_size"] == 8 and options["num_persistent"] == 0
    assert options["memory"]["depth"] == 2  # inherited from associative_recall_lmm
    # a flat override of a nested option is ambiguous: it says which spelling to use
    with pytest.raises(ConfigError, match=r"\['chunk_size'\] given both flat and under memory"):
        load_config(merged, ["model.mixer_options.chunk_size=4"])
    cleared = tmp_path / "cleared.yaml"
    cleared.write_text("extends: base.yaml\nmodel:\n  mixer: attention\n  mixer_options: {}\n")
    assert load_config(cleared).model.mixer_options == {}
    # the shipped attention baseline must not inherit the memory's options
    assert load_config("forecasting/etth1_attention").model.mixer_options == {}


def test_a_check_of_a_section_is_reported_under_its_name():
    """A message that names a field reads "model.field ..."; one that does not (an unknown
    mixer) reads "model: ..." rather than gluing the section to its first word."""
    with pytest.raises(ConfigError, match=r"^model: unknown mixer 'nope'"):
        from_dict(
            {"task": "associative_recall", "model": {"mixer": "nope"}, "train": {"max_steps": 1}}
        )


def test_config_changes_name_what_computes_differently_and_skip_what_only_reports():
    saved = load_config("lm/tiny", ["train.max_steps=10", "optim.lr=0.003"]).to_dict()
    current = load_config(
        "lm/tiny",
        ["train.max_steps=12", "train.progress=false", "train.checkpoint_every=3", "optim.lr=0.5"],
    ).to_dict()
    assert config_changes(saved, current) == ["optim.lr: 0.003 -> 0.5", "train.max_steps: 10 -> 12"]
    assert config_changes(current, current) == []
    older = {**saved, "optim": {k: v for k, v in saved["optim"].items() if k != "lr"}}
    assert config_changes(older, current, keys_saved_only=True) == ["train.max_steps: 10 -> 12"]
    assert config_changes(older, current)[0] == "optim.lr: None -> 0.5"
