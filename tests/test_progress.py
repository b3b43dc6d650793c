"""What a run shows while it trains (topk/progress.py): bars on a terminal, lines elsewhere, one
line per evaluated epoch in train.log, and the running loss read on the host only when shown."""

from __future__ import annotations

import io
import logging

import torch
from test_faults import run_main

from conftest import run_in_process
from topk import progress as progress_module
from topk.progress import Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class CountedLoss:
    """A stand-in for the device's running loss sum that counts its reads on the host."""

    def __init__(self):
        self.reads = 0

    def __float__(self) -> float:
        self.reads += 1
        return 12.0


def test_a_terminal_gets_an_epoch_bar_with_the_metric_and_best_and_a_batch_bar_with_images_per_second():
    stream = Terminal()
    progress = Progress(3, 0, "smooth_svm seed 0", "val/top5", enabled=True, stream=stream)
    for epoch in progress:
        meter = progress.batches(epoch, 4)
        for index in range(4):
            meter.update(index, 32, torch.tensor(8.0), 32 * (index + 1))
        progress.close_batches()
        progress.epoch_done({"epoch": epoch, "train/loss": 0.25, "val/top5": 40.0 + epoch, "seconds": 1.0},
                            best_epoch=epoch, best_value=40.0 + epoch)
    progress.close()
    text = stream.getvalue()
    assert "smooth_svm seed 0: 100%" in text and "3/3" in text and "val/top5=43.00" in text and "best=43.00@3" in text
    assert "epoch 1:" in text and "0/4" in text and "batch/s" in text  # cleared when the epoch ends


def test_elsewhere_a_line_every_n_batches_and_one_per_evaluated_epoch(caplog):
    progress = Progress(2, 0, "ce seed 0", "last", enabled=True, every=10, stream=io.StringIO())
    loss = CountedLoss()
    with caplog.at_level(logging.INFO, logger="topk.progress"):
        meter = progress.batches(1, 30)
        for index in range(30):
            meter.update(index, 60, loss, 60 * (index + 1))
        progress.epoch_done({"epoch": 1, "train/loss": 0.5, "seconds": 2.0}, None, None)  # not evaluated
        progress.epoch_done({"epoch": 2, "train/loss": 0.4, "test/top1": 55.5, "seconds": 2.0}, None, None)
    lines = [record.getMessage() for record in caplog.records]
    assert [line.split(":")[0] for line in lines[:3]] == [f"epoch 1, batch {n}/30" for n in (10, 20, 30)]
    assert "images/s" in lines[0] and "s left in the epoch" in lines[0]
    assert lines[3:] == ["epoch 2: train/loss 0.4000, test/top1 55.50, 2.0 s"]
    assert loss.reads == 3  # the running loss is read once per line, not per batch


def test_a_terminal_reads_the_running_loss_at_most_once_a_second(monkeypatch):
    monkeypatch.setattr(progress_module, "LOSS_READ_SECONDS", 3600.0)
    progress = Progress(1, 0, "ce", "last", enabled=True, stream=Terminal())
    loss = CountedLoss()
    meter = progress.batches(1, 50)
    for index in range(50):
        meter.update(index, 8, loss, 8 * (index + 1))
    progress.close()
    assert loss.reads == 0


def test_off_shows_nothing_and_a_run_logs_nothing_per_batch(tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="topk.progress"):
        run_in_process(tmp_path / "quiet", ["trainer.epochs=2", "trainer.batch_size=60"])
    assert not [record for record in caplog.records if record.name == "topk.progress"]


def test_a_run_names_its_directory_and_setting_first_and_logs_every_evaluated_epoch(tmp_path):
    run_dir = tmp_path / "run"
    code, stderr = run_main(["trainer.epochs=3", "trainer.batch_size=60", "trainer.progress_every=15",
                             "trainer.eval_every=2", "trainer.device=cpu", f"hydra.run.dir={run_dir}"],
                            quick=False)  # train.py, in this process; the line names the device, on a GPU machine too
    assert code == 0, stderr
    log = (run_dir / "train.log").read_text().splitlines()
    assert log[0].endswith(f"{run_dir}: dataset=circles (6 classes), model=linear, loss=ce, k=5, 3 epochs, seed 0, "
                           "device cpu")
    assert sum("epoch 1, batch 15/30: loss" in line for line in log) == 1  # not a terminal: lines
    epochs = [line.split(" - ")[1].split(":")[0] for line in log if " - epoch " in line and "batch" not in line]
    assert epochs == ["epoch 2", "epoch 3"]  # evaluated every 2 epochs and at the last
