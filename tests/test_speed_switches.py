"""trainer.amp, trainer.channels_last and trainer.compile give the results of a plain run, within
the tolerance of their arithmetic, and keep checkpoints interchangeable."""

from __future__ import annotations

import pytest
import torch

from conftest import run_in_process
from topk.checkpoints import load_checkpoint
from topk.errors import ConfigError
from topk.losses.smooth_svm import SmoothTopKSVM
from topk.models.densenet import CifarDenseNet
from topk.precision import MixedPrecision, channels_last, unwrap

DENSENET = ["model=densenet40_12", "model.depth=10"]
CIFAR = ["dataset=cifar100", "dataset.val_size=100", "trainer.batch_size=100", *DENSENET,
         "trainer.epochs=1", "trainer.selection_metric=val/top5", "loss=smooth_svm"]


def one_step(precision_mode: str, layout=lambda x: x, model_layout=torch.contiguous_format):
    """Loss and first-layer gradient of one smooth-SVM step of a small CIFAR DenseNet."""
    torch.manual_seed(0)
    model = CifarDenseNet(10, (3, 32, 32), depth=7, bottleneck=False, compression=1.0).to(memory_format=model_layout)
    images = layout(torch.randn(8, 3, 32, 32, generator=torch.Generator().manual_seed(1)))
    labels = torch.arange(8) % 10
    precision = MixedPrecision(precision_mode)
    with precision.autocast():
        scores = model(images)
    loss = SmoothTopKSVM(k=2)(scores.float(), labels)
    loss.backward()
    first_conv = next(m for m in model.modules() if isinstance(m, torch.nn.Conv2d))
    return loss.detach(), first_conv.weight.grad.clone(), scores.dtype


@pytest.mark.parametrize("mode,dtype,tolerance", [("bf16", torch.bfloat16, 5e-2), ("fp16", torch.float16, 1e-2)])
def test_autocast_forward_with_float32_loss_matches_float32(mode, dtype, tolerance):
    reference_loss, reference_grad, reference_dtype = one_step("off")
    loss, grad, scores_dtype = one_step(mode)
    assert reference_dtype == torch.float32 and scores_dtype == dtype
    torch.testing.assert_close(loss, reference_loss, rtol=tolerance, atol=tolerance)
    torch.testing.assert_close(grad, reference_grad, rtol=10 * tolerance, atol=tolerance)


def test_channels_last_gives_the_same_step():
    reference_loss, reference_grad, _ = one_step("off")
    loss, grad, _ = one_step("off", channels_last, torch.channels_last)
    torch.testing.assert_close(loss, reference_loss, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(grad, reference_grad, rtol=1e-4, atol=1e-6)


def test_training_forward_is_the_model_itself_without_autocast_and_float32_with_it():
    model = CifarDenseNet(10, (3, 32, 32), depth=7, bottleneck=False, compression=1.0)
    images = torch.randn(2, 3, 32, 32)
    assert MixedPrecision("off").forward(model) is model
    scores = MixedPrecision("bf16").forward(model)(images)
    assert scores.dtype == torch.float32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        torch.testing.assert_close(scores, model(images).float())


def test_bad_amp_value_lists_the_choices():
    with pytest.raises(ConfigError, match="trainer.amp must be one of off, bf16, fp16, got 'fp8'"):
        MixedPrecision("fp8")


# fp16 on a CPU has no fast kernels (a DenseNet epoch takes 20 s here): its loss scaling is
# checked end to end on an MLP, whose arithmetic it changes as much.
@pytest.mark.parametrize("switch,model", [("trainer.amp=bf16", []), ("trainer.amp=fp16", ["model=mlp"]),
                                          ("trainer.channels_last=true", [])])
def test_end_to_end_switch_matches_a_plain_run(tmp_path, tiny_cifar100, switch, model):
    overrides = [*(arg for arg in CIFAR if not model or arg not in DENSENET), f"dataset.root={tiny_cifar100}", *model]
    plain, _ = run_in_process(tmp_path / "plain", overrides)
    switched, _ = run_in_process(tmp_path / "switched", [*overrides, switch])
    tolerance = 1e-3 if "channels_last" in switch else 5e-2
    assert switched["status"] == "completed"
    assert switched["test"]["loss"] == pytest.approx(plain["test"]["loss"], rel=tolerance)
    if "channels_last" in switch:  # same arithmetic up to summation order: same ranking
        assert switched["test"]["top5"] == pytest.approx(plain["test"]["top5"], abs=0.5)


def test_compile_matches_eager_and_checkpoints_stay_plain(tmp_path):
    overrides = ["model=mlp", "trainer.epochs=3", "optim.lr=0.05"]
    eager, _ = run_in_process(tmp_path / "eager", overrides)
    compiled, _ = run_in_process(tmp_path / "compiled", [*overrides, "trainer.compile=true"])
    for metric in ("loss", "top1", "top2"):
        assert compiled["test"][metric] == pytest.approx(eager["test"][metric], rel=1e-4, abs=1e-4)
    keys = set(load_checkpoint(tmp_path / "compiled" / "checkpoints" / "last.pt")["model"])
    assert keys == set(load_checkpoint(tmp_path / "eager" / "checkpoints" / "last.pt")["model"])
    # a compiled run resumes an eager one's checkpoint
    resumed, _ = run_in_process(tmp_path / "eager", [*overrides, "trainer.epochs=4", "trainer.resume=true",
                                                     "trainer.compile=true"])
    epochs = (tmp_path / "eager" / "history.csv").read_text().splitlines()[1:]
    assert [line.split(",")[0] for line in epochs] == ["1", "2", "3", "4"] and resumed["status"] == "completed"


def test_unwrap_reaches_the_module_under_compile():
    model = torch.nn.Linear(2, 3)
    assert unwrap(torch.compile(model)) is model
