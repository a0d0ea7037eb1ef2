"""Posterior quantities of the cue-weight model from fixed draws, against hand computations (no sampling)."""

from __future__ import annotations

import itertools

import arviz as az
import numpy as np
import pandas as pd
import pytest

from discern_stats.bayes import CueWeightModel
from discern_stats.core.coding import STRUCTURE_STEPS, cue_codes


def _logistic(x):
    return 1 / (1 + np.exp(-x))


def _structure_model(weights: dict[str, np.ndarray], alpha: np.ndarray, u: np.ndarray) -> CueWeightModel:
    """One LLM, report-structure rows of 3 worlds at every step, and a posterior of fixed draws:
    ``weights[cue]``, ``alpha`` and the world effects ``u`` have shape (chains, draws[, worlds])."""
    rows = []
    for w, step in itertools.product(range(3), STRUCTURE_STEPS):
        codes = cue_codes("competition", f"structure={step}")
        rows.append({"llm": "m", "intervention": "C0", "stratum": "core", "world_id": f"w{w}", "block": "structure",
                     **codes, "y": int((w + STRUCTURE_STEPS.index(step)) % 2)})
    m = CueWeightModel(pd.DataFrame(rows))
    assert m.cues == ["repetition", "speaker", "lineage"]
    beta = np.stack([weights[c] for c in m.cues], axis=-1)[:, :, None, :]  # chain, draw, llm, cue
    sigma = np.ones(alpha.shape)
    m.idata = az.from_dict({"posterior": {"beta": beta, "alpha": alpha[:, :, None, None],
                                          "sigma_u": sigma[:, :, None], "z_u": u[:, :, None, :]}},
                           coords={"llm": ["m"], "cue": m.cues, "block": ["structure"], "world": ["w0", "w1", "w2"]},
                           dims={"beta": ["llm", "cue"], "alpha": ["llm", "block"], "sigma_u": ["llm"],
                                 "z_u": ["llm", "world"]})
    return m


def test_successive_cue_effects_are_the_contrasts_they_name():
    """p(step s) - p(step s-1) per draw, by hand, for repetition / speaker / lineage; two chains
    that differ, so a quantity built from the first chain only would not match."""
    w = {"repetition": np.array([[1.2, 1.0], [0.2, 0.4]]), "speaker": np.array([[0.9, 0.8], [1.5, 1.1]]),
         "lineage": np.array([[0.5, 0.7], [-0.3, 0.1]])}
    alpha = np.array([[-0.2, 0.1], [0.4, -0.5]])
    u = np.array([[[0.3, -0.6, 0.0], [0.1, 0.2, -0.4]], [[-0.5, 0.5, 0.2], [0.0, -0.1, 0.3]]])
    m = _structure_model(w, alpha, u)
    cues = ["repetition", "speaker", "lineage"]
    for k, cue in enumerate(cues):
        got = m.ame("m", cue)
        assert got.shape == (4,)  # 2 chains x 2 draws: every chain
        want = []
        for c, d in itertools.product(range(2), range(2)):  # the stacking order (chain, draw)
            def p(step: int, world: int) -> float:
                eta = alpha[c, d] + u[c, d, world] + sum((0.5 if step >= j + 1 else -0.5) * w[cj][c, d]
                                                        for j, cj in enumerate(cues))
                return _logistic(eta)
            want.append(100 * np.mean([p(k + 1, x) - p(k, x) for x in range(3)]))
        assert got == pytest.approx(want, abs=1e-12), cue
    # the old toggle-everywhere average differs (it evaluated impossible configurations)
    toggled = []
    c, d = 0, 0
    for step, x in itertools.product(range(4), range(3)):
        codes = [0.5 if step >= j + 1 else -0.5 for j in range(3)]
        rest = alpha[c, d] + u[c, d, x] + sum(codes[j] * w[cj][c, d] for j, cj in enumerate(cues) if cj != "speaker")
        toggled.append(_logistic(rest + 0.5 * w["speaker"][c, d]) - _logistic(rest - 0.5 * w["speaker"][c, d]))
    assert abs(100 * np.mean(toggled) - m.ame("m", "speaker")[0]) > 0.5


def test_ame_thins_across_all_chains():
    w = {"repetition": np.full((2, 6), 1.0), "speaker": np.full((2, 6), 0.5), "lineage": np.full((2, 6), 0.2)}
    w["repetition"][1] = 3.0  # the second chain differs
    m = _structure_model(w, np.zeros((2, 6)), np.zeros((2, 6, 3)))
    full = m.ame("m", "repetition")
    thin = m.ame("m", "repetition", max_draws=4)
    assert full.shape == (12,) and thin.shape == (4,)
    assert thin.min() == pytest.approx(full[:6].mean()) and thin.max() == pytest.approx(full[6:].mean())
