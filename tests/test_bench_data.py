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
