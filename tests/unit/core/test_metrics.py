"""Error metrics and the constant-mean baseline."""

import pandas as pd
import pytest

from analysis.core.metrics import constant_mean_mae, mae, mae_by_step


def test_mae_and_errors():
    assert mae([1, 2, 3], [2, 2, 5]) == pytest.approx(1.0)
    with pytest.raises(ValueError):
        mae([1], [1, 2])


def test_constant_mean_mae():
    assert constant_mean_mae([10, 20], [15, 25, 5]) == pytest.approx((0 + 10 + 10) / 3)
    with pytest.raises(ValueError, match="training length"):
        constant_mean_mae([], [1])


def test_mae_by_step():
    frame = pd.DataFrame({"step": [0, 0, 1, 2], "predicted": [5, 7, 3, 9], "true": [6, 6, 3, 1]})
    out = mae_by_step(frame, max_step=1)
    assert out["step"].tolist() == [0, 1] and out["mae"].tolist() == [1.0, 0.0] and out["n"].tolist() == [2, 1]
