"""One specification per hierarchical model, from which both backends are derived.

A `HierarchicalGLM` says, once: the family (binomial-logit counts or a normal outcome), the unit
whose coefficients are grouped (an LLM, or an LLM x strategy group), the coefficient blocks of a
unit with their priors, the data (a design row per cell), and the group effects:

    eta_c = a_c' theta[unit_c] + u[unit_c, group_c]
    binomial: k_c ~ Binomial(n_c, logistic(eta_c))        normal: y_c ~ N(eta_c, s[unit_c])
    theta[l] = [block_1[l] | block_2[l] | ...]  (each block's trailing dims flattened, in order)
    a block with ``sd``:  block[l, ...] ~ N(0, sd)
    a pooled block:       block[l, j] ~ N(mu_j, tau_j),  mu_j ~ N(0, mu_sd),  tau_j ~ Gamma(tau_shape, tau_rate)
    u[l, g] = sigma[l] z[l, g],  z ~ N(0, 1),  sigma[l] ~ HalfNormal(sigma_sd)
    s[l] ~ HalfNormal(resid_sd)  (normal family)

With ``crossed`` effects (issue 25.2; none by default) eta_c gains sum_t v_t[level_t(c)],
v_t = sigma_t z_t, z_t ~ N(0, 1), sigma_t ~ HalfNormal(sd_t): random intercepts shared across units
(e.g. (1 | source), or an item effect shared by every LLM x strategy beside the nested u).

With ``mean_terms`` (a structured pooled mean, issue 25.3) the pooled block's mean is a regression
on the units' factors instead of one mu per coefficient:

    block[l, j] ~ N(m[l, j], tau_j),   m[l, j] = sum_t effect_t[level_t(l), j]
    plain term:        effect_t[v, j] ~ N(0, sd_t)                 (one coefficient per level)
    sum-to-zero term:  effect_t[., j] = Q_t f_t[., j],  f_t ~ N(0, sd_t)

Q_t (levels x levels - 1) is the orthonormal Helmert basis of the contrasts (columns orthonormal,
each summing to 0), so effect_t ~ N(0, sd_t^2 (I - 11'/n)): exchangeable levels whose effects sum
to 0. The terms replace mu (a plain term spans the intercept); tau is then the SD of what the
terms leave unexplained (for units = LLM x strategy, terms strategy + LLM: tau is the interaction).
In the samplers' layout the mean is m = X beta with X (units x R) the terms' columns side by side
(one-hot for a plain term, Q_t[level] for a sum-to-zero one) and beta_r ~ N(0, sd_r).

`to_pymc` writes this model in PyMC (for NUTS: nutpie, pymc, numpyro, blackjax); `sample` runs
the exact Gibbs samplers on the same model (`logit_gibbs` for the binomial family, `gauss_gibbs`
for the normal one) and names the draws as the PyMC model does. A prior changed here changes both,
as bambi derives its backend model from one formula.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from .hyperpriors import PoolingPriors


@dataclass(frozen=True)
class Block:
    """Per-unit coefficients ``name`` with dims (unit, *dims). ``sd``: fixed prior N(0, sd);
    ``sd=None``: pooled across units, N(mu, tau) per coefficient. ``intercept``: its columns are
    one-hot (every cell has exactly one 1 among them), which the Gibbs sampler uses for a
    translation move against the group effects."""

    name: str
    dims: tuple[str, ...]
    sd: float | None = None
    intercept: bool = False


@dataclass(frozen=True)
class MeanTerm:
    """One factor of the units in a structured pooled mean (module docstring): ``level[l]`` is unit
    l's level of the factor, whose levels are ``coords[dim]``. The effect is named ``name``, dims
    (dim, *pooled block dims); a sum-to-zero term's free coefficients are ``name + "_raw"``, dims
    (dim + "_contrast", *pooled block dims)."""

    name: str
    dim: str
    level: np.ndarray
    sd: float
    sum_to_zero: bool = False


@dataclass(frozen=True)
class CrossedEffect:
    """A random intercept shared across units (issue 25.2), crossed with them: row r gets
    ``sigma * z[index[r]]``, z ~ N(0, 1) over the levels ``coords[dim]``, sigma ~ HalfNormal(sd),
    e.g. (1 | source) or an item effect shared by every LLM x strategy. Named ``sigma_name`` and
    ``z_name`` (dims (dim,)) in both backends."""

    sigma_name: str
    z_name: str
    dim: str
    index: np.ndarray
    sd: float


def sum_to_zero_basis(n: int) -> np.ndarray:
    """The orthonormal Helmert basis (n x n-1): column j (1-based) is (1, ..., 1, -j, 0, ...) /
    sqrt(j (j + 1)) with j ones; Q'Q = I and 1'Q = 0, so QQ' = I - 11'/n."""
    Q = np.zeros((n, max(n - 1, 0)))
    for j in range(1, n):
        Q[:j, j - 1] = 1.0
        Q[j, j - 1] = -float(j)
        Q[:, j - 1] /= np.sqrt(j * (j + 1.0))
    return Q


@dataclass
class HierarchicalGLM(PoolingPriors):
    family: str  # "binomial" or "normal"
    unit: str  # the coordinate name of the unit axis
    coords: dict[str, list[Any]]  # every dim named by the unit, the blocks and the group effect
    blocks: list[Block]
    A: np.ndarray  # cells x P design rows, columns in block order
    unit_index: np.ndarray
    y: np.ndarray  # k (binomial) or the outcome (normal)
    n: np.ndarray | None = None  # binomial trials per cell
    group: str | None = None  # coordinate name of the group effect (None: no group effects)
    group_index: np.ndarray | None = None
    resid_sd: float = 1.0
    centered: bool = True  # the PyMC build's parameterisation; both Gibbs samplers interweave the two
    # parameter names (mu, tau, sigma, z, z_pooled, resid) and the saved fit's data names (y: the
    # observed outcome; row, cluster, column: dims; n, unit_of_row, group_of_row, design: constant data)
    names: dict[str, str] = field(default_factory=dict)
    mean_terms: list[MeanTerm] = field(default_factory=list)  # a structured pooled mean (replaces mu)
    crossed: list[CrossedEffect] = field(default_factory=list)  # random intercepts shared across units

    def __post_init__(self) -> None:
        if self.family not in ("binomial", "normal"):
            raise ValueError(f"family must be 'binomial' or 'normal', not {self.family!r}")
        pooled = [b for b in self.blocks if b.sd is None]
        if len(pooled) > 1:
            raise ValueError("at most one pooled block")
        y = self.names.get("y", "y")
        self.names = {"mu": "mu", "tau": "tau", "sigma": "sigma_u", "z": "z_u", "z_pooled": "z", "resid": "resid_sd",
                      "y": y, "row": f"{y}_row", "cluster": f"{y}_cluster", "column": f"{y}_column", "n": f"{y}_n",
                      "unit_of_row": f"{y}_{self.unit}", "group_of_row": f"{y}_{self.group}", "design": f"{y}_design",
                      **self.names}
        self.A = np.ascontiguousarray(self.A, float)
        if self.A.shape[1] != sum(self._width(b) for b in self.blocks):
            raise ValueError(f"A has {self.A.shape[1]} columns; the blocks need {sum(self._width(b) for b in self.blocks)}")
        for t in self.crossed:
            ix = np.asarray(t.index)
            if ix.shape != (len(self.A),) or ix.min() < 0 or ix.max() >= len(self.coords[t.dim]) or not t.sd > 0:
                raise ValueError(f"crossed effect {t.z_name!r}: index needs one level of coords[{t.dim!r}] per row, sd > 0")
        if self.mean_terms:
            if not pooled:
                raise ValueError("mean_terms need a pooled block")
            if not any(not t.sum_to_zero for t in self.mean_terms):
                raise ValueError("mean_terms need a plain (not sum-to-zero) term: they replace mu, the intercept")
            for t in self.mean_terms:
                lv = np.asarray(t.level)
                if lv.shape != (self.n_unit,) or lv.min() < 0 or lv.max() >= len(self.coords[t.dim]):
                    raise ValueError(f"mean term {t.name!r}: level needs one index into coords[{t.dim!r}] per unit")
                if t.sum_to_zero and len(self.coords[t.dim]) < 2:
                    raise ValueError(f"mean term {t.name!r}: a sum-to-zero term needs at least 2 levels")
                if t.sum_to_zero:
                    self.coords.setdefault(f"{t.dim}_contrast", list(range(len(self.coords[t.dim]) - 1)))

    # -- layout
    def _width(self, b: Block) -> int:
        return int(np.prod([len(self.coords[d]) for d in b.dims])) if b.dims else 1

    def columns(self) -> dict[str, np.ndarray]:
        """The columns of theta that hold each block."""
        out, start = {}, 0
        for b in self.blocks:
            w = self._width(b)
            out[b.name] = np.arange(start, start + w)
            start += w
        return out

    def column_labels(self) -> list[str]:
        """One label per column of A: the block name and its coordinates, e.g. ``beta[order]``."""
        out = []
        for b in self.blocks:
            if not b.dims:
                out.append(b.name)
                continue
            grids = np.meshgrid(*[np.asarray(self.coords[d], dtype=str) for d in b.dims], indexing="ij")
            out += [f"{b.name}[{', '.join(t)}]" for t in zip(*[g.ravel() for g in grids])]
        return out

    @property
    def n_unit(self) -> int:
        return len(self.coords[self.unit])

    def mean_design(self) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]] | tuple[None, None, dict]:
        """The structured pooled mean m = X beta in the samplers' layout: X (units x R), the prior
        SD of each beta_r, and the columns of X (rows of beta) that hold each term; (None, None, {})
        without mean terms."""
        if not self.mean_terms:
            return None, None, {}
        cols, sds, where, start = [], [], {}, 0
        for t in self.mean_terms:
            n = len(self.coords[t.dim])
            basis = sum_to_zero_basis(n) if t.sum_to_zero else np.eye(n)
            cols.append(basis[np.asarray(t.level, np.int64)])
            sds.append(np.full(basis.shape[1], float(t.sd)))
            where[t.name] = np.arange(start, start + basis.shape[1])
            start += basis.shape[1]
        return np.column_stack(cols), np.concatenate(sds), where

    def _prior(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        cols = self.columns()
        P = self.A.shape[1]
        sd = np.ones(P)
        pooled, intercepts = [], []
        for b in self.blocks:
            c = cols[b.name]
            if b.sd is None:
                pooled.extend(c)
            else:
                sd[c] = b.sd
            if b.intercept:
                intercepts.extend(c)
        return np.zeros(P), sd, np.asarray(pooled, np.int64), np.asarray(intercepts, np.int64)

    # -- backends
    def to_pymc(self) -> None:
        """Add this model's variables and likelihood to the PyMC model on the context stack."""
        import pymc as pm
        import pytensor.tensor as pt
        nm = self.names
        L = self.n_unit
        parts = []
        for b in self.blocks:
            dims = (self.unit, *b.dims)
            if b.sd is not None:
                v = pm.Normal(b.name, 0.0, b.sd, dims=dims)
            else:
                mu = self._pymc_mean(b) if self.mean_terms else pm.Normal(nm["mu"], 0.0, self.mu_sd, dims=b.dims)
                # zero-avoiding Gamma scale: with few units a HalfNormal puts mass at tau -> 0,
                # the neck of the funnel where centred coefficients diverge
                tau = pm.Gamma(nm["tau"], alpha=self.tau_shape, beta=self.tau_rate, dims=b.dims)
                if self.centered:
                    v = pm.Normal(b.name, mu, tau, dims=dims)
                else:
                    z = pm.Normal(nm["z_pooled"], 0.0, 1.0, dims=dims)
                    v = pm.Deterministic(b.name, mu + tau * z, dims=dims)
            parts.append(pt.reshape(v, (L, -1)))
        theta = pt.concatenate(parts, axis=1)
        ui = self.unit_index
        eta = (self.A * theta[ui]).sum(axis=1)
        if self.group is not None:
            sigma = pm.HalfNormal(nm["sigma"], self.sigma_sd, dims=self.unit)
            z = pm.Normal(nm["z"], 0.0, 1.0, dims=(self.unit, self.group))
            eta = eta + sigma[ui] * z[ui, self.group_index]
        for t in self.crossed:  # eta_c += sigma_t v_t[level_t(c)]
            st = pm.HalfNormal(t.sigma_name, t.sd)
            zt = pm.Normal(t.z_name, 0.0, 1.0, dims=t.dim)
            eta = eta + st * zt[np.asarray(t.index, np.int64)]
        # observed variables (not a Potential), so PyMC knows the likelihood: pm.sample_posterior_predictive
        # and pm.compute_log_likelihood work on this model as on any other
        if self.family == "binomial":
            pm.Binomial(nm["y"], n=self.n, logit_p=eta, observed=self.y)
        else:
            s = pm.HalfNormal(nm["resid"], self.resid_sd, dims=self.unit)
            pm.Normal(nm["y"], eta, s[ui], observed=self.y)

    def _pymc_mean(self, b: Block):
        """The structured pooled mean of block ``b`` (units x its dims) in PyMC: the sum of the terms'
        effects at each unit's levels."""
        import pymc as pm
        import pytensor.tensor as pt
        shape = [len(self.coords[d]) for d in b.dims]
        total = 0.0
        for t in self.mean_terms:
            n = len(self.coords[t.dim])
            if t.sum_to_zero:
                f = pm.Normal(f"{t.name}_raw", 0.0, t.sd, dims=(f"{t.dim}_contrast", *b.dims))
                Q = sum_to_zero_basis(n)
                eff = pm.Deterministic(t.name, pt.reshape(pt.dot(Q, pt.reshape(f, (n - 1, -1))), (n, *shape)),
                                       dims=(t.dim, *b.dims))
            else:
                eff = pm.Normal(t.name, 0.0, t.sd, dims=(t.dim, *b.dims))
            total = total + eff[np.asarray(t.level, np.int64)]
        return total

    def logit_design(self):
        """The binomial model in the layout of `logit_gibbs`."""
        from .logit_gibbs import LogitDesign
        mean, sd, pooled, intercepts = self._prior()
        has_g = self.group is not None
        X, Xsd, _ = self.mean_design()
        return LogitDesign(A=self.A, llm=self.unit_index, world=self.group_index if has_g else np.zeros(len(self.A), int),
                           k=self.y, n=self.n, n_llm=self.n_unit, n_world=len(self.coords[self.group]) if has_g else 1,
                           prior_mean=mean, prior_sd=sd, pooled=pooled, intercepts=intercepts,
                           world_effects=has_g, mean_X=X, mean_sd=Xsd, crossed_index=self._crossed_index(),
                           crossed_sd=self._crossed_sd(), **self.pooling_priors())

    def gauss_design(self):
        """The normal model in the layout of `gauss_gibbs`."""
        from .gauss_gibbs import GaussDesign
        mean, sd, pooled, intercepts = self._prior()
        has_g = self.group is not None
        X, Xsd, _ = self.mean_design()
        return GaussDesign(A=self.A, unit=self.unit_index, group=self.group_index if has_g else np.zeros(len(self.A), int),
                           y=self.y, n_unit=self.n_unit, n_group=len(self.coords[self.group]) if has_g else 1,
                           prior_mean=mean, prior_sd=sd, pooled=pooled, intercepts=intercepts,
                           resid_sd=self.resid_sd, group_effects=has_g, mean_X=X, mean_sd=Xsd,
                           crossed_index=self._crossed_index(), crossed_sd=self._crossed_sd(), **self.pooling_priors())

    def _crossed_index(self) -> list[np.ndarray]:
        return [np.asarray(t.index, np.int64) for t in self.crossed]

    def _crossed_sd(self) -> list[float]:
        return [float(t.sd) for t in self.crossed]

    def crossed_offset(self, post: Any, idx: np.ndarray) -> np.ndarray | None:
        """(chain, len(idx), rows) sum_t sigma_t z_t[level_t(row)] at the draws ``idx`` of a posterior
        Dataset, or None without crossed effects."""
        if not self.crossed:
            return None
        total = 0.0
        for t in self.crossed:
            sg = np.asarray(post[t.sigma_name].isel(draw=idx))
            z = np.asarray(post[t.z_name].isel(draw=idx).transpose("chain", "draw", t.dim))
            total = total + sg[..., None] * z[..., np.asarray(t.index, np.int64)]
        return total

    def sample(self, *, draws: int, tune: int, chains: int, random_seed: int, keep_group_effects: bool = True,
               progress: Callable[[int, int], None] | None = None, **kwargs: Any) -> tuple[dict, dict, dict]:
        """Run the Gibbs sampler of the family; returns (posterior arrays named as in `to_pymc`,
        their dims, sampler statistics)."""
        if self.family == "binomial":
            from .logit_gibbs import logit_gibbs
            out = logit_gibbs(self.logit_design(), draws=draws, tune=tune, chains=chains, random_seed=random_seed,
                              keep_u=keep_group_effects, progress=progress, **kwargs)
        else:
            from .gauss_gibbs import gauss_gibbs
            out = gauss_gibbs(self.gauss_design(), draws=draws, tune=tune, chains=chains, random_seed=random_seed,
                              keep_u=keep_group_effects, progress=progress, **kwargs)
        return self.name_draws(out)

    def name_draws(self, out: dict[str, np.ndarray]) -> tuple[dict, dict, dict]:
        nm = self.names
        th = out["theta"]
        C, S, L = th.shape[:3]
        cols = self.columns()
        post, dims = {}, {}
        for b in self.blocks:
            shape = [len(self.coords[d]) for d in b.dims]
            post[b.name] = th[..., cols[b.name]].reshape(C, S, L, *shape)
            dims[b.name] = [self.unit, *b.dims]
            if b.sd is None:
                post[nm["tau"]] = out["tau"].reshape(C, S, *shape)
                dims[nm["tau"]] = list(b.dims)
                if self.mean_terms:
                    X, _, where = self.mean_design()
                    coef = out["mean_coef"]  # C x S x R x K
                    for t in self.mean_terms:
                        c = coef[:, :, where[t.name]]
                        if t.sum_to_zero:
                            post[f"{t.name}_raw"] = c.reshape(C, S, -1, *shape)
                            dims[f"{t.name}_raw"] = [f"{t.dim}_contrast", *b.dims]
                            c = np.einsum("vr,csrk->csvk", sum_to_zero_basis(len(self.coords[t.dim])), c)
                        post[t.name] = c.reshape(C, S, -1, *shape)
                        dims[t.name] = [t.dim, *b.dims]
                    m = np.einsum("lr,csrk->cslk", X, coef).reshape(C, S, L, *shape)
                else:
                    post[nm["mu"]] = out["mu"].reshape(C, S, *shape)
                    dims[nm["mu"]] = list(b.dims)
                    m = post[nm["mu"]][:, :, None]
                if not self.centered:
                    post[nm["z_pooled"]] = (post[b.name] - m) / post[nm["tau"]][:, :, None]
                    dims[nm["z_pooled"]] = [self.unit, *b.dims]
        if self.group is not None:
            post[nm["sigma"]] = out["sigma"]
            dims[nm["sigma"]] = [self.unit]
            if "u" in out:
                post[nm["z"]] = out["u"] / out["sigma"][..., None]
                dims[nm["z"]] = [self.unit, self.group]
        for i, t in enumerate(self.crossed):
            post[t.sigma_name] = out["crossed_sigma"][..., i]
            dims[t.sigma_name] = []
            post[t.z_name] = out[f"crossed_v{i}"] / out["crossed_sigma"][..., i, None]
            dims[t.z_name] = [t.dim]
        if self.family == "normal":
            post[nm["resid"]] = out["resid_sd"]
            dims[nm["resid"]] = [self.unit]
        stats = {k.removeprefix("accept_"): round(float(np.min(v)), 4) for k, v in out.items()
                 if k.startswith("accept_")}
        return post, dims, stats
