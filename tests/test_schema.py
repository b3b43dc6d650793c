"""The typed schema of every config group (topk/schema/): it covers every option, matches the
constructors, converts and refuses values at compose time, and says each refusal in one sentence.
The same refusals through ``train.py`` (exit status, nothing written) are in ``test_faults.py``."""

from __future__ import annotations

import dataclasses
import inspect
import math

import pytest
from hydra.utils import get_method
from omegaconf import OmegaConf

from conftest import CONF, compose_config
from topk.schema import config_problem
from topk.schema.groups import SCHEMAS, TrainerSchema
from topk.schema.rules import rule_of
from topk.schema.validate import command_line_problem

GROUPS = ("loss", "model", "dataset", "optim", "schedule", "augment", "logger")
# Keys of a schema that are not constructor parameters: Hydra's own and what train.py resolves.
NOT_PARAMETERS = {"_target_", "_partial_"}


def options(group: str) -> list[str]:
    return sorted(path.stem for path in (CONF / group).glob("*.yaml"))


def problem(*overrides: str) -> str | None:
    """The sentence ``python train.py OVERRIDES`` stops with before training, or ``None``."""
    found = command_line_problem(list(overrides), CONF, "train")
    return found if found is not None else config_problem(compose_config(overrides))


def fields(schema) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(schema)}


@pytest.mark.parametrize("group,option", [(g, o) for g in GROUPS for o in options(g)])
def test_every_option_composes_onto_its_schema_with_every_field_set(group, option):
    cfg = compose_config([f"{group}={option}"])
    nodes = [cfg.augment.images, cfg.augment.mix] if group == "augment" else [cfg[group]]
    for node in (n for n in nodes if n is not None):
        schema = OmegaConf.get_type(node)
        assert dataclasses.is_dataclass(schema), f"{group}={option} has no schema"
        assert set(node) == set(fields(schema)), f"{group}={option}: YAML keys differ from {schema.__name__}"
        assert not OmegaConf.missing_keys(node), f"{group}={option} leaves {OmegaConf.missing_keys(node)} unset"
        target = get_method(node._target_)
        parameters = inspect.signature(target).parameters
        assert set(node) - NOT_PARAMETERS <= set(parameters), f"{schema.__name__} has keys {target} does not take"


def test_every_schema_field_has_a_rule():
    schemas = [schema for group in SCHEMAS.values() for schema in group.values()]
    for schema in schemas:
        for name, field in fields(schema).items():
            if not dataclasses.is_dataclass(field.type) and name not in ("images", "mix"):
                assert rule_of(field) is not None, f"{schema.__name__}.{name} has no rule"


def test_the_trainer_node_and_the_top_level_are_checked():
    cfg = compose_config()
    assert OmegaConf.get_type(cfg.trainer) is TrainerSchema
    assert config_problem(cfg) is None


@pytest.mark.parametrize("experiment", [path.stem for path in (CONF / "experiment").glob("*.yaml")])
def test_every_experiment_keeps_the_schema_at_both_scales(experiment):
    assert problem(f"+experiment={experiment}") is None
    assert problem(f"+experiment={experiment}", "+scale=smoke") is None


def test_the_words_the_schema_allows_are_the_librarys_own():
    from topk.data.cifar import NOISE_GROUPS, NORMALISATIONS
    from topk.data.images import TRAIN_CROPS
    from topk.distributed import BACKENDS
    from topk.functional.sorting import DISTRIBUTIONS, SORTERS
    from topk.losses.diffsort import TOP1_MODES
    from topk.models.heads import HEADS
    from topk.models.resnet import RESNETS
    from topk.precision import AMP_DTYPES
    from topk.run_dir import KEPT_CHECKPOINTS

    def words(schema, name):
        return set(rule_of(fields(schema)[name]).allowed.removeprefix("one of ").split(", "))

    assert words(TrainerSchema, "amp") == set(AMP_DTYPES)
    assert words(TrainerSchema, "keep_checkpoints") == set(KEPT_CHECKPOINTS)
    assert words(TrainerSchema, "distributed_backend") == set(BACKENDS)
    assert words(SCHEMAS["model"]["linear"], "head") == set(HEADS)
    assert words(SCHEMAS["model"]["resnet"], "name") == set(RESNETS)
    assert words(SCHEMAS["loss"]["diffsort_topk_ce"], "sorter") == set(SORTERS)
    assert words(SCHEMAS["loss"]["diffsort_topk_ce"], "distribution") == set(DISTRIBUTIONS)
    assert words(SCHEMAS["loss"]["diffsort_topk_ce"], "top1_mode") == set(TOP1_MODES)
    assert words(SCHEMAS["dataset"]["cifar100"], "noise_groups") == set(NOISE_GROUPS)
    assert words(SCHEMAS["dataset"]["cifar100"], "normalisation") == set(NORMALISATIONS)
    assert words(SCHEMAS["dataset"]["imagenet"], "train_crop") == set(TRAIN_CROPS)


@pytest.mark.parametrize("word,value", [("no", False), ("off", False), ("false", False), ("yes", True),
                                        ("on", True), ("true", True)])
def test_switches_read_yes_no_on_off(word, value):
    cfg = compose_config([f"trainer.compile={word}", f"trainer.tensorboard={word}",
                          f"trainer.resume={word}", f"model.pretrained={word}"])
    assert (cfg.trainer.compile, cfg.trainer.tensorboard, cfg.trainer.resume, cfg.model.pretrained) == (value,) * 4
    cfg = compose_config(["dataset=imagenet", f"dataset.check_images={word}"])
    assert cfg.dataset.check_images is value


# Each bad value and the one sentence it stops with (issue 25's cases first).
REFUSED = [
    (["trainer.compile=maybe"], "trainer.compile must be true or false (yes/no and on/off read as such), got 'maybe'."),
    (["trainer.epoch=3"], "trainer.epoch is not a setting; did you mean trainer.epochs? trainer's settings are epochs, "),
    (["+trainer.epoch=3"], "trainer.epoch is not a setting; did you mean trainer.epochs? trainer's settings are epochs, "),
    (["+trainer.epochs=3"], "trainer.epochs is already set; set it without the leading +."),
    (["loss=hinge", "loss.k=true"], "loss.k must be a whole number of at least 1, got true."),
    (["loss=hinge", "loss.k=2.5"], "loss.k must be a whole number of at least 1, got 2.5."),
    (["loss=smooth_svm", "loss.tau=abc"], "loss.tau must be a finite number of at least 0, got 'abc'."),
    (["loss=smooth_svm", "loss.alpha=[1,2]"], "loss.alpha must be a finite number of at least 0, got [1, 2]."),
    (["loss=smooth_svm", "loss.tau=inf"], "loss.tau must be a finite number of at least 0, got inf."),
    (["schedule.gamma=-1"], "schedule.gamma must be a finite number above 0, got -1.0."),
    (["schedule.milestones=[abc]"], "schedule.milestones must be a list of increasing whole numbers of at least 1 "
                                    "(epochs), e.g. [60, 120], got 'abc' in the list."),
    (["schedule.milestones=[1.5]"], "schedule.milestones must be a list of increasing whole numbers of at least 1 "
                                    "(epochs), e.g. [60, 120], got 1.5 in the list."),
    (["schedule.milestones=[20,10]"], "schedule.milestones must be a list of increasing whole numbers of at least 1 "
                                      "(epochs), e.g. [60, 120], got [20, 10]."),
    (["k=true"], "k must be a whole number of at least 1, got true."),
    (["kk=3"], "kk is not a setting; did you mean k? the top-level settings are experiment, protocol_card, seed, "),
    (["+foo=3"], "foo is not a setting; the top-level settings are experiment, protocol_card, seed, "),
    (["loss.k=3"], "loss.k is not a setting of loss (torch.nn.CrossEntropyLoss); loss's settings are weight, "
                  "label_smoothing."),
    (["loss=hnge"], "loss=hnge is not an option of loss; did you mean loss=hinge? choose one of cal_hinge, ce, "),
    (["+experiment=nope"], "experiment=nope is not an option of experiment; choose one of b18_cifar_noise, "),
    (["trainer.device=gpu"], "trainer.device must be one of auto, cpu, cuda, cuda:N, got 'gpu'."),
    (["image_size=0"], "image_size must be a whole number of at least 1, got 0."),
    (["seed=99999999999999999999999"], "seed must be a whole number from 0 to 2**63 - 1, got 99999999999999999999999."),
    (["seed=-1"], "seed must be a whole number from 0 to 2**63 - 1, got -1."),
    (["dataset.sigma=nan"], "dataset.sigma must be a finite number of at least 0, got nan."),
    (["trainer.ks=[0]"], "trainer.ks must be a list of whole numbers of at least 1, e.g. [1, 5], got [0]."),
    (["trainer.selection_metric=test/top1"], "trainer.selection_metric must be last or a validation metric "
                                             "val/<metric> (e.g. val/top5); never test/, got 'test/top1'."),
    (["trainer.amp=fp8"], "trainer.amp must be one of off, bf16, fp16, got 'fp8'."),
    (["trainer.batch_size=0"], "trainer.batch_size must be a whole number of at least 1 or null (the full batch), got 0."),
    (["optim.lr=-1"], "optim.lr must be a finite number of at least 0, got -1.0."),
    (["optim=sgd", "optim.momentum=1"], "optim.momentum must be a finite number of at least 0 and below 1, got 1.0."),
    (["model.head=cos"], "model.head must be one of linear, cosine, got 'cos'."),
    (["model=mlp", "model.hidden=0"], "model.hidden must be a whole number of at least 1, got 0."),
    (["augment=mixup", "augment.mix.alpha=0"], "augment.mix.alpha must be a finite number above 0, got 0.0."),
    (["augment=standard", "augment.images.crop_padding=-4"],
     "augment.images.crop_padding must be a whole number of at least 0 or null (no random crop), got -4."),
    (["dataset=cifar100", "dataset.noise=1.5"], "dataset.noise must be a finite number of at least 0 and at most 1, got 1.5."),
    (["loss=diffsort_topk_ce", "loss.sorter=quick"],
     "loss.sorter must be one of neuralsort, softsort, odd_even, bitonic, splitter_selection, got 'quick'."),
    (["loss=ldam", "loss.weight=[1,-1]"], "loss.weight must be null, balanced or a list of one finite weight "
                                                 "of at least 0 per class, not all 0, got [1, -1]."),
    (["loss.k=["], "the override 'loss.k=[' cannot be read (no viable alternative at input '['); see Hydra's override grammar."),
]


@pytest.mark.parametrize("overrides,sentence", REFUSED, ids=[" ".join(o) for o, _ in REFUSED])
def test_a_bad_value_is_refused_in_one_sentence(overrides, sentence):
    found = problem(*overrides)
    assert found is not None and found.startswith(sentence), found
    assert "\n" not in found and found.endswith("."), found


@pytest.mark.parametrize("overrides", [["loss=hinge", "loss.k='3'"], ["trainer.batch_size=null"],
                                       ["optim=sgd", "optim.lr=1e-3"], ["schedule.milestones=[]"],
                                       ["trainer.device=cuda:1"], ["trainer.selection_metric=val/macro_top5"]])
def test_good_values_pass(overrides):
    assert problem(*overrides) is None


def test_a_swept_key_is_checked_per_job_not_on_the_base():
    assert command_line_problem(["-m", "loss=hinge", "loss.k=1,abc"], CONF, "train") is None  # the callback's
    assert problem("-m", "trainer.epoch=3").startswith("trainer.epoch is not a setting")


def test_number_rules_refuse_nan_and_infinity():
    rule = rule_of(fields(SCHEMAS["optim"]["optimizer"])["lr"])
    assert rule.accepts(0.1) and not rule.accepts(math.nan) and not rule.accepts(math.inf)
    assert not rule.accepts(True) and not rule.accepts("0.1")
