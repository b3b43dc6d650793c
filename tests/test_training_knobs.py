"""The training options beside the loss and the data (topk/training_steps.py, topk/schedules.py):
label smoothing, AdamW, gradient clipping, the moving average of the weights, gradient
accumulation, early stopping and the plateau schedule; each against what torch (or a hand
computation) says, and a run using them resumed exactly."""

from __future__ import annotations

import copy

import pandas as pd
import pytest
import torch
from test_train import read_record, stop_after

from conftest import compose_config, run_in_process
from topk.build import build
from topk.checkpoints import BestModel, TrainingState
from topk.engine import FitSettings, check_fit_settings, train_one_epoch
from topk.errors import ConfigError
from topk.precision import MixedPrecision
from topk.schedules import PlateauLR, WarmupCosineLR
from topk.schema.check import config_problem
from topk.stopping import RunInterrupted
from topk.training_steps import OptimizerSteps, early_stop_reason

VAL = ["dataset.val_per_class=20", "trainer.selection_metric=val/top1"]


def linear_data(batches: int, size: int, dtype=torch.float64, seed: int = 0):
    """``batches`` batches of ``size`` points of 3 features and 4 classes."""
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn(batches * size, 3, generator=generator, dtype=dtype)
    labels = torch.randint(0, 4, (batches * size,), generator=generator)
    return [(inputs[i:i + size], labels[i:i + size]) for i in range(0, batches * size, size)]


def linear_model(dtype=torch.float64) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Linear(3, 4).to(dtype)


def no_mix(inputs, labels):
    return inputs, labels


def test_label_smoothing_gives_torchs_value():
    cfg = compose_config(["loss=ce", "loss.label_smoothing=0.1"])
    loss = build(cfg.loss, "loss")
    scores, labels = torch.randn(6, 4, generator=torch.Generator().manual_seed(1)), torch.tensor([0, 1, 2, 3, 0, 1])
    expected = torch.nn.functional.cross_entropy(scores, labels, label_smoothing=0.1)
    assert loss(scores, labels).item() == pytest.approx(expected.item(), rel=1e-12)
    assert loss(scores, labels).item() != pytest.approx(torch.nn.functional.cross_entropy(scores, labels).item())
    assert compose_config(["loss=ce"]).loss.label_smoothing == 0.0
    assert config_problem(compose_config(["loss.label_smoothing=1.5"])) == (
        "loss.label_smoothing must be a finite number of at least 0 and at most 1, got 1.5.")


def test_adamw_is_built_with_torchs_defaults():
    cfg = compose_config(["optim=adamw"])
    optimizer = build(cfg.optim, "optim", linear_model().parameters())
    assert type(optimizer) is torch.optim.AdamW
    assert optimizer.defaults["lr"] == 0.001 and optimizer.defaults["weight_decay"] == 0.01


@pytest.mark.parametrize("amp", ["off", "fp16"])
def test_clipping_bounds_the_gradient_norm_the_step_uses(amp):
    """The step sees gradients of norm at most ``clip_grad_norm``; with fp16 the scaler unscales
    them before the clip (clipping the scaled ones would leave a norm 65,536 times smaller)."""
    def step_norms(clip):
        model = linear_model(torch.float32)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        norms = []
        optimizer.register_step_pre_hook(lambda *_: norms.append(float(torch.linalg.vector_norm(
            torch.stack([torch.linalg.vector_norm(p.grad) for p in model.parameters()])))))
        steps = OptimizerSteps(model, optimizer, MixedPrecision(amp, "cpu"), clip_grad_norm=clip)
        batches = [(inputs.float() * 100, labels) for inputs, labels in linear_data(2, 8)]
        train_one_epoch(model, torch.nn.functional.cross_entropy, optimizer, batches, no_mix, None, epoch=1,
                        steps=steps)
        return norms

    assert min(step_norms(None)) > 1.0
    assert step_norms(0.5) == pytest.approx([0.5, 0.5], rel=1e-5)


def test_ema_weights_are_the_hand_computed_average_after_two_steps():
    model = linear_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    steps = OptimizerSteps(model, optimizer, ema_decay=0.9)
    weights = []
    for index, (inputs, labels) in enumerate(linear_data(2, 8)):
        steps.backward(torch.nn.functional.cross_entropy(model(inputs), labels), index, 2)
        steps.step_if_due(index, 2)
        weights.append(copy.deepcopy(model.state_dict()))
    assert not torch.equal(weights[0]["weight"], weights[1]["weight"])
    for name, averaged in steps.ema.module.state_dict().items():  # the first step's weights, then EMA
        torch.testing.assert_close(averaged, 0.9 * weights[0][name] + 0.1 * weights[1][name], rtol=1e-14, atol=0)
    assert steps.evaluated_model() is steps.ema.module


@pytest.mark.parametrize("batches, accumulate, windows", [(3, 3, [3]), (5, 3, [3, 2])])
def test_accumulating_batches_is_one_step_on_their_union(batches, accumulate, windows):
    """Plain SGD, no BatchNorm, float64: ``accumulate`` batches of 4 make the update of one batch
    of their 4·accumulate points (an epoch's last, shorter window: of its own points)."""
    data = linear_data(batches, 4)
    accumulated, whole = linear_model(), linear_model()
    optimizer = torch.optim.SGD(accumulated.parameters(), lr=0.3)
    train_one_epoch(accumulated, torch.nn.functional.cross_entropy, optimizer, data, no_mix, None, epoch=1,
                    steps=OptimizerSteps(accumulated, optimizer, accumulate_grad_batches=accumulate))
    start, union = 0, []
    for window in windows:
        union.append((torch.cat([x for x, _ in data[start:start + window]]),
                      torch.cat([y for _, y in data[start:start + window]])))
        start += window
    train_one_epoch(whole, torch.nn.functional.cross_entropy, torch.optim.SGD(whole.parameters(), lr=0.3), union,
                    no_mix, None, epoch=1)
    for name, value in whole.state_dict().items():
        torch.testing.assert_close(accumulated.state_dict()[name], value, rtol=1e-13, atol=1e-15)
    assert not torch.equal(whole.weight, linear_model().weight)


def test_cosine_counts_optimiser_steps_when_batches_accumulate():
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
    assert WarmupCosineLR(optimizer, epochs=2, steps_per_epoch=5, accumulate_grad_batches=2).total_steps == 6
    assert compose_config(["schedule=cosine", "trainer.accumulate_grad_batches=4"]).schedule.accumulate_grad_batches == 4


def test_early_stopping_counts_evaluations_since_the_best():
    state = TrainingState(BestModel("val/top1", epoch=2, value=50.0))
    state.history = [{"epoch": 1, "val/top1": 40.0}, {"epoch": 2, "val/top1": 50.0}, {"epoch": 3},
                     {"epoch": 4, "val/top1": 45.0}]
    state.epoch = 4
    assert early_stop_reason(state, 2) is None  # epoch 3 was not evaluated: one evaluation since
    state.history.append({"epoch": 5, "val/top1": 50.0})  # a tie is no improvement
    state.epoch = 5
    assert early_stop_reason(state, 2) == ("early stopping after epoch 5: val/top1 has not improved on "
                                           "epoch 2's 50 for 2 evaluations (trainer.early_stopping_patience)")
    assert early_stop_reason(state, None) is None


def test_early_stopping_stops_a_run_at_the_right_epoch_and_says_why(tmp_path):
    """With a learning rate of 0 the selection metric never improves on epoch 1: patience 2
    stops after epoch 3 of 10."""
    record, _ = run_in_process(tmp_path, [*VAL, "trainer.epochs=10", "optim.lr=0",
                                          "trainer.early_stopping_patience=2"])
    assert record["status"] == "completed" and record["best_epoch"] == 1
    assert read_record(tmp_path)["stopped_early"].startswith("early stopping after epoch 3: val/top1 has not improved")
    assert pd.read_csv(tmp_path / "history.csv")["epoch"].tolist() == [1, 2, 3]


def test_early_stopping_and_plateau_need_a_validation_metric():
    assert config_problem(compose_config(["trainer.early_stopping_patience=3", "trainer.selection_metric=last"])) == (
        "trainer.early_stopping_patience=3 stops when the selection metric stops improving, and "
        "trainer.selection_metric is last; choose a validation metric (trainer.selection_metric=val/top1) "
        "or trainer.early_stopping_patience=null.")
    assert config_problem(compose_config(["schedule=plateau", "trainer.selection_metric=last"])) == (
        "schedule.metric must be a validation metric val/<metric> (e.g. val/top1 or val/loss; it is "
        "trainer.selection_metric unless set), got 'last'.")
    with pytest.raises(ConfigError, match=r"schedule.metric='val/loss' is not available in this run"):
        check_fit_settings(FitSettings(epochs=2), ["test"], [1], schedule_metric="val/loss")


def test_plateau_follows_the_metric_up_or_down():
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
    assert PlateauLR(optimizer, "val/top5").mode == "max" and PlateauLR(optimizer, "val/loss").mode == "min"
    schedule = PlateauLR(optimizer, "val/loss", patience=2)
    rates = []
    for loss in (1.0, 0.9, 0.95, 0.92, 0.91, 0.85):
        schedule.step(loss)
        rates.append(optimizer.param_groups[0]["lr"])
    assert rates == pytest.approx([1.0, 1.0, 1.0, 1.0, 0.1, 0.1])  # three evaluations above 0.9


def test_a_run_lowers_the_rate_on_a_plateau(tmp_path):
    """A rate too small to change the validation accuracy: patience 1 lowers it after the third
    evaluation (the first sets the best, two more fail to beat it)."""
    run_in_process(tmp_path, [*VAL, "optim=sgd", "optim.lr=1e-12", "schedule=plateau", "schedule.patience=1",
                              "trainer.epochs=5"])
    rates = pd.read_csv(tmp_path / "history.csv")["lr"].tolist()
    assert rates == pytest.approx([1e-12, 1e-12, 1e-12, 1e-13, 1e-13], rel=1e-9)


def test_a_run_with_every_knob_resumes_exactly(tmp_path):
    """EMA (its average in last.pt), accumulation, clipping, plateau and early stopping: stopped
    after epoch 2 and resumed, the run ends as an uninterrupted one."""
    overrides = [*VAL, "model=mlp", "optim=adamw", "optim.lr=0.05", "trainer.batch_size=200", "trainer.epochs=5",
                 "trainer.ema_decay=0.8", "trainer.accumulate_grad_batches=2", "trainer.clip_grad_norm=1.0",
                 "trainer.early_stopping_patience=4", "schedule=plateau", "schedule.patience=1",
                 "loss.label_smoothing=0.1"]
    whole, _ = run_in_process(tmp_path / "whole", overrides)
    with pytest.raises(RunInterrupted):
        run_in_process(tmp_path / "split", overrides, on_epoch_end=stop_after(2))
    resumed, _ = run_in_process(tmp_path / "split", [*overrides, "trainer.resume=true"])
    assert resumed["status"] == "completed"
    for key in ("test", "val", "best_epoch"):
        assert resumed[key] == whole[key], key
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "whole" / "history.csv").drop(columns="seconds"),
                                  pd.read_csv(tmp_path / "split" / "history.csv").drop(columns="seconds"))


@pytest.mark.slow  # about 20 s: torchrun's start-up (make test-all)
def test_torchrun_with_accumulation_clipping_and_ema_equals_one_process(tmp_path):
    """Two processes (DistributedDataParallel, gradients all-reduced once per optimiser step, the
    batches before it under no_sync) train as one does: accumulation over 3 global batches, the
    clip of the averaged gradients, the moving average."""
    from test_distributed import (
        CIRCLES,
        assert_same_test_metrics,
        finished,
        record,
        single_process,
        torchrun,
    )

    knobs = [*CIRCLES, "trainer.accumulate_grad_batches=3", "trainer.clip_grad_norm=0.5", "trainer.ema_decay=0.9"]
    expected = single_process(tmp_path / "one", knobs)
    returncode, output = finished(torchrun([*knobs, f"hydra.run.dir={tmp_path / 'two'}"]))
    assert returncode == 0, output[-3000:]
    two = record(tmp_path / "two")
    assert two["processes"] == 2
    assert_same_test_metrics(two["test"], expected["test"])
