"""One quick end-to-end job of each experiment family at smoke scale, from the command line to its
table (and figure), on the tiny data sets topk.data.fixtures writes in the real formats; and a
sweep in which one run fails still gives its table, the failure counted."""

from __future__ import annotations

import pytest
from test_faults import run_main

from topk.data.fixtures import write_smoke_data
from topk.records import find_results
from topk.report import make_figures, make_tables

FIGURE_IDS = {"s20_exp2", "s20_cifar", "g22_time"}

# one job per family: the sweep's keys pinned to one value each
FAMILIES = {
    "s20_exp2": ["dataset.d=90", "loss=topk_transition"],
    "s20_cifar": ["model=resnet18", "augment=mixup", "loss=topk_transition", "trainer.selection_metric=val/top5"],
    "g22_cifar_noise": ["dataset.noise=0.2", "loss=noised_bal"],
    "b18_imagenet": ["dataset.train_size=12", "loss=smooth_svm"],
    "g22_plantnet": ["g22_method=noised_imbal_k3"],
    "g22_imagenet_lt": ["g22_method=ldam"],  # trained once, a model kept per K
    "g22_time": ["k=5", "loss=noised_bal", "n_samples=3"],
    "p22_imagenet": ["p22_method=neuralsort_mix50", "dataset.val_size=48"],
    "zoo_plantnet": ["loss=diffsort_topk_ce"],
}


@pytest.fixture(scope="module")
def smoke_data(tmp_path_factory):
    return write_smoke_data(tmp_path_factory.mktemp("smoke_data"))


def smoke_sweep(experiment, sweep_dir, data_root, overrides) -> tuple[int, str]:
    """``python train.py -m +experiment=... +scale=smoke ...`` in this process (a new process for
    each would spend more time importing than training): ``(exit code, stderr)``."""
    return run_main(["-m", f"+experiment={experiment}", "+scale=smoke", f"data_root={data_root}",
                     f"hydra.sweep.dir={sweep_dir}", "hydra.launcher.n_jobs=1", *overrides], quick=False)


@pytest.mark.parametrize("experiment", sorted(FAMILIES))
def test_one_job_per_family_gives_a_record_and_its_table(tmp_path, smoke_data, experiment):
    sweep_dir = tmp_path / "sweep"
    code, stderr = smoke_sweep(experiment, sweep_dir, smoke_data, FAMILIES[experiment])
    assert code == 0, stderr[-3000:]
    records = find_results(sweep_dir)
    assert [record["status"] for record in records] == ["completed"]
    assert records[0]["experiment"] == experiment and records[0]["params"]["trainer.epochs"] == 1
    if experiment == "g22_imagenet_lt":  # LDAM ignores K: selected at K = 1, a model kept at 3 and 5
        assert {metric: sorted(kept["test_per_class"]) for metric, kept in records[0]["also_selected"].items()} == {
            "val/top3": ["top1", "top10", "top3", "top5"], "val/top5": ["top1", "top10", "top3", "top5"]}
    out = tmp_path / "out"
    if experiment in make_tables.TABLES:
        assert make_tables.main([experiment, "--sweep-dir", str(sweep_dir), "--out", str(out)]) == 0
        assert (out / f"{experiment}.md").exists() and (out / f"{experiment}.tex").exists()
    if experiment in FIGURE_IDS:
        assert make_figures.main([experiment, "--sweep-dir", str(sweep_dir), "--out", str(out)]) == 0
        assert (out / f"{experiment}.png").exists()


def test_a_failed_run_is_counted_and_the_table_still_made(tmp_path, smoke_data):
    """epsilon = 1e308 makes the loss infinite: that run fails, the other completes, the table
    shows both."""
    sweep_dir = tmp_path / "sweep"
    smoke_sweep("g22_epsilon", sweep_dir, smoke_data, ["loss.epsilon=0.1,1e308"])
    statuses = sorted(record["status"] for record in find_results(sweep_dir))
    assert statuses == ["completed", "failed"]
    out = tmp_path / "out"
    assert make_tables.main(["g22_epsilon", "--sweep-dir", str(sweep_dir), "--out", str(out)]) == 0
    table = (out / "g22_epsilon.md").read_text()
    assert "1 failed" in table and "1 completed" in table
