"""The sync-free hot path (docs/design.md §5, topk.sync): no loss reads its data on the host
outside eager CPU mode, and the training loop reads the loss once per epoch.

The proof on a CPU: ``torch.compile(..., fullgraph=True)`` refuses any read of a tensor's value
on the host (``bool(t)``, ``int(t)``, ``t.item()``), which would break the graph; every loss of
``conf/loss/`` compiles whole, forward and backward, and gives eager mode's value and gradient.
The sweep uses the ``aot_eager`` backend (the full graph, autograd included, without C++ code
generation); one test compiles the smooth top-k SVM with the default backend (inductor).
"""

from __future__ import annotations

import contextlib
import math
import os
import subprocess
import sys
from dataclasses import dataclass
from types import SimpleNamespace
from unittest import mock

import pytest
import torch
from hydra.utils import instantiate

from conftest import CONF, ROOT, compose_config
from helpers import mixup_target, value_and_grad
from topk import build as builder
from topk.distributed import Distributed
from topk.engine import train_one_epoch
from topk.errors import NonFiniteLossError
from topk.functional import perturbed
from topk.functional.perturbed import (
    candidates_perturbed,
    compiled_kth_largest,
    kth_largest,
    kth_largest_of,
    noise_source,
)
from topk.losses import SmoothTopKSVM
from topk.losses.hinge import topk_hinge
from topk.losses.noised import noised_topk_hinge
from topk.losses.targets import expected_over_targets
from topk.stopping import STOP_CHECK_EVERY
from topk.sync import sync_free

LOSSES = sorted(path.stem for path in (CONF / "loss").glob("*.yaml"))
NOISED = {"noised_bal", "noised_imbal"}
BATCH, CLASSES = 8, 7  # 7 classes: k = 5 of the configs, log_esp in 3 levels


@pytest.fixture(autouse=True)
def fresh_compiler():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def build_loss(name: str):
    """The loss of ``conf/loss/<name>.yaml`` as ``train.py`` builds it (k = 5), for CLASSES classes."""
    node = compose_config([f"loss={name}"]).loss
    splits = builder.DataFacts(CLASSES, [3 * c + 2 for c in range(CLASSES)])
    return instantiate(node, **builder.data_arguments(node, splits))


def seeded_value_and_grad(loss_fn, scores, target):
    with torch.random.fork_rng():
        torch.manual_seed(7)  # the noised losses' noise: the same draws for both calls
        return value_and_grad(loss_fn, scores, target)


def assert_same(got, expected, rtol=1e-12, atol=1e-12):
    for actual, wanted in zip(got, expected):
        torch.testing.assert_close(actual, wanted, rtol=rtol, atol=atol)


@pytest.mark.parametrize("soft", [False, True], ids=["labels", "mixup"])
@pytest.mark.parametrize("name", LOSSES)
def test_every_loss_compiles_whole_and_matches_eager(name, soft):
    """Compiled and eager in sync-free mode take the same path (same noise for the noised
    losses: aot_eager draws it with torch's own generator); the deterministic losses match eager
    CPU mode too, whose shortcuts read the data (the noised losses' differ in their noise draws,
    see the next test)."""
    generator = torch.Generator().manual_seed(0)
    scores = 3 * torch.randn(BATCH, CLASSES, generator=generator, dtype=torch.float64)
    target = mixup_target(generator, BATCH, CLASSES) if soft else torch.randint(0, CLASSES, (BATCH,), generator=generator)
    loss = build_loss(name)
    compiled = seeded_value_and_grad(torch.compile(loss, fullgraph=True, backend="aot_eager"), scores, target)
    with sync_free():
        assert_same(compiled, seeded_value_and_grad(loss, scores, target))
    if name not in NOISED:
        assert_same(compiled, seeded_value_and_grad(loss, scores, target))
    assert math.isfinite(compiled[0]) and torch.isfinite(compiled[1]).all()


@pytest.mark.parametrize("soft", [False, True], ids=["labels", "mixup"])
def test_noised_hinge_compiled_with_given_noise_matches_eager_noise_on_candidates(soft, monkeypatch):
    """Eager CPU mode draws noise only for the candidate columns, compiled mode for every column
    (above SMALL_PERTURBATION, lowered here): with the noise given, both give the same value and
    gradient (G22 eq. 11-12)."""
    monkeypatch.setattr(perturbed, "SMALL_PERTURBATION", 0)
    generator = torch.Generator().manual_seed(1)
    batch, classes, k, epsilon, n_samples = 6, 40, 3, 0.2, 5
    scores = 4 * torch.randn(batch, classes, generator=generator, dtype=torch.float64)
    target = mixup_target(generator, batch, classes) if soft else torch.randint(0, classes, (batch,), generator=generator)
    noise = torch.randn(n_samples, batch, classes, generator=generator, dtype=torch.float64)
    margins = torch.ones(classes, dtype=torch.float64)
    draw = noise_source(n_samples, scores, noise=noise)
    assert candidates_perturbed(scores, k + 1, epsilon, draw)[0].shape[0] < classes // 2  # eager prunes here

    def loss(s, t):
        return noised_topk_hinge(s, t, margins, k, epsilon, n_samples, noise=noise).mean()

    compiled = value_and_grad(torch.compile(loss, fullgraph=True, backend="aot_eager"), scores, target)
    assert_same(compiled, value_and_grad(loss, scores, target))


@pytest.mark.parametrize("dtype,tau,rtol", [(torch.float64, 1.0, 1e-10), (torch.float32, 1.0, 1e-5),
                                            (torch.float32, 1e-4, 1e-5)])
def test_smooth_svm_in_log_space_alone_matches_eager_linear_space(dtype, tau, rtol):
    """k = 9: eager CPU mode computes log_esp in linear space where its rows pass the underflow
    check (at τ = 1), sync-free mode (as compiled, by the test above) every level in log space
    (B18 Algorithm 1); the same to rounding, also at B18 Table 5's smallest temperature."""
    generator = torch.Generator().manual_seed(2)
    scores = (4 * torch.randn(BATCH, 12, generator=generator, dtype=torch.float64)).to(dtype)
    labels = torch.randint(0, 12, (BATCH,), generator=generator)
    loss = SmoothTopKSVM(k=9, tau=tau)
    with sync_free():
        log_space = value_and_grad(loss, scores, labels)
    assert_same(log_space, value_and_grad(loss, scores, labels), rtol=rtol, atol=rtol)


def test_smooth_svm_compiles_with_inductor():
    """Real code generation (the default backend) of the costliest loss, forward and backward."""
    generator = torch.Generator().manual_seed(3)
    scores = torch.randn(BATCH, CLASSES, generator=generator)
    labels = torch.randint(0, CLASSES, (BATCH,), generator=generator)
    loss = SmoothTopKSVM(k=3, tau=0.5)
    compiled = value_and_grad(torch.compile(loss, fullgraph=True), scores, labels)
    assert_same(compiled, value_and_grad(loss, scores, labels), rtol=1e-5, atol=1e-6)


def test_loss_compile_selects_the_kth_largest_in_one_kernel_with_eager_results():
    """``loss.compile=true`` (inductor): the compiled k-th largest gives eager's values and
    positions (ties counted as torch.topk counts them, the last of equal ones), for any number
    of candidates; the noised loss then gives eager's value and gradient under the same noise."""
    generator = torch.Generator().manual_seed(4)
    for shape in [(9, 4, 6), (31, 10, 64)]:
        ties = torch.randint(0, 4, shape, generator=generator).double()
        strided = torch.randn(shape[::-1], generator=generator, dtype=torch.float64).permute(2, 1, 0)
        for values in (ties, strided, torch.randn(shape, generator=generator, dtype=torch.float64)):
            got, expected = compiled_kth_largest()(values, 3), kth_largest(values, 3)
            assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1])
    last = torch.zeros(600, 1, 2, dtype=torch.bfloat16)  # bfloat16 counts exactly only up to 256
    last[599] = 1.0
    assert kth_largest_of(last, 1, compile=True)[1].tolist() == [[599, 599]]
    scores = 4 * torch.randn(16, 300, generator=generator, dtype=torch.float64)
    labels = torch.randint(0, 300, (16,), generator=generator)
    noise = torch.randn(8, 16, 300, generator=generator, dtype=torch.float64)  # above SMALL_PERTURBATION
    margins = torch.ones(300, dtype=torch.float64)

    def loss(compile):
        return lambda s: noised_topk_hinge(s, labels, margins, 2, 0.2, 8, noise=noise, compile=compile).mean()

    for path in (contextlib.nullcontext, sync_free):  # the candidates, then every column
        with path():
            eager = value_and_grad(loss(False), scores)
            with mock.patch.object(perturbed, "kth_largest", side_effect=AssertionError("eager kth_largest")):
                compiled = value_and_grad(loss(True), scores)
        assert torch.equal(eager[0], compiled[0]) and torch.equal(eager[1], compiled[1])


def test_loss_compile_without_a_compiler_stops_with_one_sentence(tmp_path):
    """A real failed compilation (no C++ compiler, an empty compile cache) becomes a ConfigError
    that names the cause and the way out."""
    script = ("import torch\n"
              "from topk.losses.noised import NoisedTopKHingeLoss\n"
              "NoisedTopKHingeLoss(compile=True)(torch.randn(64, 100), torch.arange(64))\n")  # above SMALL_PERTURBATION
    env = {**os.environ, "CXX": str(tmp_path / "no-compiler"), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache")}
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True)
    assert result.returncode != 0
    assert ("topk.errors.ConfigError: loss.compile=true could not compile the k-th largest kernel "
            "(InvalidCxxCompiler: No working C++ compiler found") in result.stderr
    assert result.stderr.rstrip().endswith("or set loss.compile=false.")


def test_sync_free_soft_target_with_more_labels_than_it_evaluates_gives_nan():
    """Without reading the target, two labels per row are evaluated (Mixup's); a row with more
    gets a NaN loss, which training reports, rather than a silently truncated one."""
    scores = torch.randn(3, 6, dtype=torch.float64)
    target = torch.tensor([[0.5, 0.5, 0, 0, 0, 0], [0, 0, 1.0, 0, 0, 0], [0.2, 0.3, 0.5, 0, 0, 0]],
                          dtype=torch.float64)
    exact = expected_over_targets(lambda s, y: topk_hinge(s, y, 2, 1.0), scores, target)
    with sync_free():
        per_sample = expected_over_targets(lambda s, y: topk_hinge(s, y, 2, 1.0), scores, target)
    torch.testing.assert_close(per_sample[:2], exact[:2])
    assert math.isnan(per_sample[2]) and math.isfinite(exact[2])


# --- the training step ----------------------------------------------------------------------------

def tiny_training(loss_fn, batches=4):
    generator = torch.Generator().manual_seed(4)
    model = torch.nn.Linear(2, 3)
    data = [(torch.randn(5, 2, generator=generator), torch.randint(0, 3, (5,), generator=generator))
            for _ in range(batches)]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    return model, optimizer, data


def test_training_reads_the_loss_at_the_epoch_end():
    """A NaN loss in batch 2 of 4 is reported once the epoch is over (no read per batch)."""
    calls = []

    def loss_fn(scores, target):
        calls.append(len(calls))
        loss = torch.nn.functional.cross_entropy(scores, target)
        return loss * math.nan if len(calls) == 2 else loss

    model, optimizer, data = tiny_training(loss_fn)
    with pytest.raises(NonFiniteLossError, match=r"the training loss became nan at epoch 3; lower optim.lr"):
        train_one_epoch(model, loss_fn, optimizer, data, lambda x, y: (x, y), None, epoch=3)
    assert len(calls) == 4


def test_training_mean_loss_weights_batches_by_their_size():
    model, optimizer, data = tiny_training(None)
    data[-1] = (data[-1][0][:2], data[-1][1][:2])
    seen = []

    def loss_fn(scores, target):
        seen.append((float(torch.nn.functional.cross_entropy(scores.detach(), target)), len(target)))
        return torch.nn.functional.cross_entropy(scores, target)

    mean = train_one_epoch(model, loss_fn, optimizer, data, lambda x, y: (x, y), None, epoch=1)
    assert mean == pytest.approx(sum(value * count for value, count in seen) / sum(c for _, c in seen))


@dataclass(frozen=True)
class FakeProcesses(Distributed):
    """Two processes as the engine sees them, each sum being this process's own value; counts
    the all-reduces of the stop flag."""

    world_size: int = 2
    stop_checks: list = None

    def sum_(self, tensor):
        return tensor

    def any(self, flag, device="cpu"):
        self.stop_checks.append(flag)
        return flag


def test_several_processes_check_the_stop_flag_every_few_batches():
    model, optimizer, data = tiny_training(None, batches=2 * STOP_CHECK_EVERY + 3)
    processes = FakeProcesses(stop_checks=[])
    stop = SimpleNamespace(requested=False)
    train_one_epoch(model, torch.nn.functional.cross_entropy, optimizer, data, lambda x, y: (x, y), None,
                    epoch=1, stop=stop, distributed=processes)
    assert processes.stop_checks == [False, False]
    stop.requested, processes.stop_checks[:] = True, []
    with pytest.raises(KeyboardInterrupt):
        train_one_epoch(model, torch.nn.functional.cross_entropy, optimizer, data, lambda x, y: (x, y), None,
                        epoch=2, stop=stop, distributed=processes)
    assert processes.stop_checks == [True]
