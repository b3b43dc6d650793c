"""Small models and classifier heads."""

from __future__ import annotations

import pytest
import torch

from topk.errors import ConfigError
from topk.models import LinearClassifier, MLPClassifier
from topk.models.heads import CosineClassifier, make_head


def test_linear_has_no_bias_and_mlp_has_the_hidden_width():
    linear = LinearClassifier(6, (2,))
    assert linear.fc.bias is None and linear.fc.weight.shape == (6, 2)
    mlp = MLPClassifier(6, (2,), hidden=16)
    assert mlp.hidden.weight.shape == (16, 2) and mlp(torch.randn(5, 2)).shape == (5, 6)


def test_cosine_head_scores_are_cosines():
    torch.manual_seed(0)
    head = CosineClassifier(4, 3)
    features = torch.randn(5, 4) * torch.tensor([[1.0], [10.0], [0.1], [3.0], [7.0]])
    scores = head(features)
    expected = torch.stack([
        torch.stack([torch.nn.functional.cosine_similarity(f, w, dim=0) for w in head.weight])
        for f in features
    ])
    torch.testing.assert_close(scores, expected)
    assert scores.abs().max() <= 1 + 1e-6
    # Scaling the features or a weight row leaves the scores unchanged.
    torch.testing.assert_close(head(3 * features), scores)


def test_models_take_the_cosine_head_and_reject_unknown_heads():
    model = MLPClassifier(6, (2,), hidden=4, head="cosine")
    assert isinstance(model.fc, CosineClassifier)
    assert isinstance(LinearClassifier(6, (2,), head="cosine").fc, CosineClassifier)
    with pytest.raises(ConfigError, match="model.head='arc' is not a classifier head; choose one of linear, cosine"):
        make_head("arc", 4, 3)
