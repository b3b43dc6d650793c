"""scripts/bench_data.py (topk.bench.data): the cores an image-file pipeline needs to keep up with
a model's step rate (issue 38 item 3)."""

from __future__ import annotations

from topk.bench import data as bench_data

ROWS = [
    {"benchmark": "cifar", "pipeline": "batched (TensorBatches)", "workers": 0, "images_per_second": 80_000.0},
    {"benchmark": "imagefolder", "pipeline": "ImageFolder JPEG (PIL + torchvision)", "workers": 0,
     "images_per_second": 800.0},
    {"benchmark": "imagefolder", "pipeline": "ImageBatches JPEG (dataset.decoder=auto)", "workers": 2,
     "images_per_second": 1_250.0},
]


def test_cores_needed_are_the_workers_that_keep_up_plus_one_for_the_training_loop():
    [row] = bench_data.cores_needed(ROWS, 2_500)  # only image-file pipelines with workers
    assert row["images_per_second_per_core"] == 625.0 and row["cores"] == 4 + 1
    assert bench_data.cores_needed(ROWS, 2_501)[0]["cores"] == 5 + 1  # a part of a core is a core


def test_the_table_says_whether_this_machine_has_the_cores():
    lines = bench_data.cores_markdown(bench_data.cores_needed(ROWS, 2_500), cores=2)
    assert "| ImageBatches JPEG (dataset.decoder=auto) | 625 | 5 | no |" in lines
    assert "| ImageBatches JPEG (dataset.decoder=auto) | 625 | 5 | yes |" in bench_data.cores_markdown(
        bench_data.cores_needed(ROWS, 2_500), cores=16)
    assert bench_data.cores_markdown([], cores=2) == []


def test_the_step_rate_is_an_option_of_the_command():
    assert bench_data.parse_args(["--step-rate", "2500"]).step_rate == 2500.0
    assert bench_data.parse_args([]).step_rate is None


def test_the_jpeg_target_compares_ours_with_the_bare_loader_at_the_same_workers():
    rows = [*ROWS, {"benchmark": "imagefolder", "pipeline": "ImageFolder JPEG (PIL + torchvision)", "workers": 2,
                    "images_per_second": 900.0}]
    text, target = bench_data.jpeg_verdict(rows, workers=2)
    assert target == {"ratio": 1.3, "achieved": 1_250.0 / 900.0, "met": True}
    assert text == ("JPEG target (ImageBatches, decoder=auto, ≥ 1.3× the bare ImageFolder loader, 2 workers each): "
                    "met, 1.39×.")
    rows[-1]["images_per_second"] = 1_000.0
    assert bench_data.jpeg_verdict(rows, workers=2)[1]["met"] is False
    assert bench_data.jpeg_verdict(ROWS, workers=2) is None  # no bare loader with 2 workers


def test_sizes_and_devices_on_the_command_line():
    args = bench_data.parse_args(["--jpeg-size", "640x480", "--workers", "15", "--decode-on", "cpu"])
    assert (args.jpeg_size, args.workers, args.decode_on) == ((640, 480), 15, "cpu")
    assert bench_data.parse_args(["--jpeg-size", "256"]).jpeg_size == (256, 256)
    assert bench_data.parse_args([]).jpeg_size == (800, 600)  # photo-like, as issue 38 measured


def test_the_step_time_table_compares_each_worker_setting_with_auto():
    from topk.bench.step_time import step_markdown

    rows = [{"setting": "auto", "workers": 1, "epoch_s": 1.0, "step_s": 0.05, "steps": 20},
            {"setting": "4", "workers": 4, "epoch_s": 1.5, "step_s": 0.075, "steps": 20}]
    lines = step_markdown(rows, "mlp", 64)
    assert "`model=mlp` at 64 px, batch 32" in lines[1]
    assert lines[-2:] == ["| auto | 1 | 0.050 | 1.00 |", "| 4 | 4 | 0.075 | 1.50 |"]
    assert bench_data.parse_args(["--step-time", "mlp"]).step_time == "mlp"


def test_decoding_on_a_gpu_the_machine_lacks_is_one_sentence(capsys):
    import pytest
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(SystemExit):
        bench_data.parse_args(["--decode-on", "cuda"])
    assert capsys.readouterr().err.strip().endswith(
        "error: --decode-on cuda needs a CUDA device and this machine has none; --decode-on cpu times the same "
        "path here.")
