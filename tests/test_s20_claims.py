"""S20's claims about its CIFAR-100 results (``s20_cifar_claims.csv``), judged in the s20_cifar
table (topk.report.claims.s20_table_claims)."""

from __future__ import annotations

import re

import pandas as pd
from test_s20_synthetic_claims import PAPER, flat

from topk import paper_results
from topk.records import EMPTY_PROVENANCE, write_results
from topk.report.claims import S20_TABLE_CLAIMS
from topk.report.tables import build_table

TABLE_I = paper_results.load("s20_table1_cifar100")
DENSENET_CUTOUT = {"ce": (70.0, 1.0), "topk_transition": (67.5, 1.3), "topk_group": (59.5, 2.0),
                   "smooth_svm": (60.0, 1.0)}  # top-k = a + b·k, k = 1…20: only this panel has curves


def record(model, augment, loss, seed, top1, top5, curve=None):
    """One run selected by val top-1 that kept its best model by val top-5 beside it
    (trainer.also_select_on); ``curve``: that model's test top-k for k = 1…20 (top-5 aside)."""
    kept = {"best_epoch": 3, "val": {"top5": 90.0}, "test": {**(curve or {}), "top5": top5}}
    return {"status": "completed", "error": None, "experiment": "s20_cifar", "dataset": "cifar100",
            "model": model, "loss": loss, "augment": augment, "seed": seed, "params": {},
            "best_epoch": 2, "selection_metric": "val/top1", "val": {"top1": 70.0},
            "test": {"top1": top1, "top5": 1.0}, "also_selected": {"val/top5": kept},
            "epoch_seconds": 1.0, "versions": {"topk": "0"}, "provenance": EMPTY_PROVENANCE}


def write_sweep(root, change=None):
    """Table I's means over three seeds (a seed moves every loss alike, so each paired difference
    is exact), a smooth SVM with Mixup that S20 has not (N/A) and must not count, and DenseNet-121
    + Cutout's top-k curves; ``change``: (model, augment, loss, top1) replaces one top-1."""
    lines = [*TABLE_I.itertuples(index=False), *[
        type("Row", (), {"model": m, "augment": "mixup", "loss": "smooth_svm", "top1": 99.0,
                         "top5": 99.0})() for m in ("resnet18", "densenet121")]]
    for job, (row, seed) in enumerate((row, seed) for row in lines for seed in range(3)):
        top1 = row.top1
        if change and (row.model, row.augment, row.loss) == change[:3]:
            top1 = change[3]
        curve = None
        if (row.model, row.augment) == ("densenet121", "cutout"):
            a, b = DENSENET_CUTOUT[row.loss]
            curve = {f"top{k}": a + b * k + 0.1 * seed for k in range(1, 21) if k != 5}
        (root / str(job)).mkdir(parents=True)
        write_results(root / str(job), record(row.model, row.augment, row.loss, seed,
                                              top1 + 0.1 * seed, row.top5 + 0.1 * seed, curve))
    return root


def judged(table) -> pd.DataFrame:
    caption, frame = table.sections[-1]
    assert caption.startswith("What the paper claims about these results")
    return frame


def test_table_i_means_make_every_table_claim_hold(tmp_path):
    table = build_table("s20_cifar", sweep_dir=write_sweep(tmp_path / "s"))
    claims = judged(table)
    assert list(claims.index) == list(paper_results.load("s20_cifar_claims")["setting"])
    table_claims = ["top-1", "top-5 below the top-k losses", "densenet121 cutout top-5",
                    "best top-5 per model", "cutout smooth svm over transition",
                    "grouping below ce", "transition over grouping"]
    assert (claims.loc[table_claims, "verdict"] == "holds").all(), claims["numbers"]
    # the curves: transition above CE from k = 9 and grouping from k = 11 (the a + b·k lines cross
    # at k = 8.3 and 10.5; top-5 is Table I's, where CE leads)
    assert claims.loc["densenet121 cutout turning points", "verdict"] == "holds"
    # the other panels have top-5 alone (the transition loss above CE there): undecided for k ≤ 2
    assert claims.loc["other panels turning points", "verdict"] == "undecided"
    # in DenseNet-121 + Cutout grouping's steeper line passes the transition loss's at k = 12
    beyond_10 = claims.loc["transition best beyond k = 10"]
    assert beyond_10["verdict"] == "does not hold"
    assert "densenet121 + cutout top12: topk_transition − topk_group = -0.40" in beyond_10["numbers"]
    assert claims.loc["top-1", "S20 says"] == ('"The table shows CE performed the best in top-1 '
                                               'accuracy, as we expected" (S20 §V-B, Table I)')
    assert claims.loc["top-1", "claim"] == "CE has the best top-1 accuracy in every panel"
    assert "The table shows CE performed the best in top-1 accuracy" in table.markdown()
    assert table.verdicts.count("holds") == 8  # 7 Table I claims, 1 top-k claim


def test_a_loss_above_ce_in_top1_fails_the_top1_claims(tmp_path):
    sweep = write_sweep(tmp_path / "s", change=("resnet18", "cutout", "topk_group", 80.0))
    claims = judged(build_table("s20_cifar", sweep_dir=sweep))
    assert claims.loc["top-1", "verdict"] == "does not hold"
    assert claims.loc["grouping below ce", "verdict"] == "does not hold"
    assert "resnet18 + cutout top1: ce − topk_group = -4.12" in claims.loc["top-1", "numbers"]
    assert claims.loc["transition over grouping", "verdict"] == "holds"  # a top-5 claim


def test_every_claim_has_its_section_and_s20s_own_sentence():
    claims = paper_results.load("s20_cifar_claims")
    assert set(claims["setting"]) == set(S20_TABLE_CLAIMS)  # each claim has its reading
    for row in claims.itertuples():
        assert re.fullmatch(r"S20 §V-B, (Table I|Fig\. 6 text)(; (Table I|§VI))?", row.location), row
    if PAPER.is_file():  # the developers' copy of S20's text
        text = flat(PAPER.read_text())
        assert [q for q in claims["quote"] if flat(q) not in text] == []
