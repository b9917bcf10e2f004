"""Slow, obvious references for the prox family: TV1D certificate and dual QP, codec, k-means, graph prox."""

from __future__ import annotations

import math
import struct

import numpy as np
import scipy.optimize

# ---- prox_tv1d -------------------------------------------------------------------------------


def tv1d_dual(z: np.ndarray, u: np.ndarray) -> np.ndarray:
    """The dual vector p with u = z - D^T p, i.e. p_k = sum_{i<=k} (z_i - u_i) (length d)."""
    return np.cumsum(np.asarray(z, np.float64) - np.asarray(u, np.float64))


def tv1d_certificate_violation(z: np.ndarray, u: np.ndarray, lam: float, anchored: bool) -> float:
    """How far u is from optimal, measured on its dual certificate (0 for the exact solution).

    u is optimal iff p = cumsum(z - u) satisfies |p_k| <= lam, p_d = 0 when not anchored, and the sign
    conditions p_k = lam where u_k > u_{k+1} and p_k = -lam where u_k < u_{k+1} (k < d); with the
    anchor p_d = lam * sign(u_d) where u_d != 0. Returns the largest violation.
    """
    z = np.asarray(z, np.float64)
    u = np.asarray(u, np.float64)
    d = len(z)
    if d == 0:
        return 0.0
    p = tv1d_dual(z, u)
    viol = max(0.0, float(np.max(np.abs(p))) - lam)
    if not anchored:
        viol = max(viol, abs(p[-1]))
    for k in range(d - 1):
        if u[k] > u[k + 1]:
            viol = max(viol, abs(p[k] - lam))
        elif u[k] < u[k + 1]:
            viol = max(viol, abs(p[k] + lam))
    if anchored and u[-1] != 0:
        viol = max(viol, abs(p[-1] - lam * math.copysign(1.0, u[-1])))
    return viol


def tv1d_slow(z: np.ndarray, lam: float, anchored: bool) -> np.ndarray:
    """The minimiser by solving the box-constrained dual QP min 0.5||z - D^T p||^2, |p| <= lam
    with scipy's L-BFGS-B in float64 (independent of the taut-string method)."""
    z = np.asarray(z, np.float64)
    d = len(z)
    m = d if anchored else d - 1
    if m == 0 or lam == 0:
        return z.copy()

    def dt(p: np.ndarray) -> np.ndarray:  # D^T p: (D^T p)_i = p_i - p_{i-1}
        full = np.zeros(d + 1)
        full[1 : m + 1] = p
        return full[1:] - full[:-1]

    def fg(p: np.ndarray):
        r = z - dt(p)
        # gradient of 0.5||r||^2 w.r.t. p: -D r, (D r)_k = r_k - r_{k+1}
        rr = np.append(r, 0.0)
        grad = -(rr[:m] - rr[1 : m + 1])
        return 0.5 * float(r @ r), grad

    res = scipy.optimize.minimize(
        fg,
        np.zeros(m),
        jac=True,
        method="L-BFGS-B",
        bounds=[(-lam, lam)] * m,
        options={"ftol": 1e-15, "gtol": 1e-12, "maxiter": 20000},
    )
    return z - dt(res.x)


def tv1d_objective(z: np.ndarray, u: np.ndarray, lam: float, anchored: bool) -> float:
    z = np.asarray(z, np.float64)
    u = np.asarray(u, np.float64)
    tv = float(np.abs(np.diff(u)).sum()) + (abs(float(u[-1])) if anchored and len(u) else 0.0)
    return 0.5 * float(((u - z) ** 2).sum()) + lam * tv


# ---- codec -----------------------------------------------------------------------------------


def runs_of_bits(words: list[int]) -> tuple[list[int], list[int]]:
    """Maximal runs of equal words: (values, lengths)."""
    values: list[int] = []
    lengths: list[int] = []
    for w in words:
        if values and values[-1] == w:
            lengths[-1] += 1
        else:
            values.append(w)
            lengths.append(1)
    return values, lengths


def elias_gamma_bits(n: int) -> str:
    """Elias gamma code of n >= 1: floor(log2 n) zeros, then n in binary (MSB first)."""
    b = bin(n)[2:]
    return "0" * (len(b) - 1) + b


def elias_gamma_bytes(lengths: list[int]) -> bytes:
    """The gamma codes of lengths, concatenated MSB-first and zero-padded to whole bytes."""
    bits = "".join(elias_gamma_bits(n) for n in lengths)
    bits += "0" * (-len(bits) % 8)
    return bytes(int(bits[i : i + 8], 2) for i in range(0, len(bits), 8))


def float32_words(x: np.ndarray) -> list[int]:
    return list(struct.unpack(f"<{x.size}I", np.asarray(x, np.float32).tobytes()))


# ---- k-means ---------------------------------------------------------------------------------


def kmeans1d_slow(values: np.ndarray, weights: np.ndarray, k: int) -> float:
    """The optimal weighted 1D k-means cost by the O(k n^2) DP over sorted values, with each
    cluster's cost computed directly (no prefix sums)."""
    order = np.argsort(values, kind="stable")
    v = np.asarray(values, np.float64)[order]
    w = np.asarray(weights, np.float64)[order]
    n = len(v)
    if n == 0:
        return 0.0

    def cost(a: int, b: int) -> float:  # cluster v[a:b]
        ww = w[a:b]
        c = float((ww * v[a:b]).sum() / ww.sum())
        return float((ww * (v[a:b] - c) ** 2).sum())

    k = min(k, n)
    inf = float("inf")
    best = [[inf] * (n + 1) for _ in range(k + 1)]
    best[0][0] = 0.0
    for j in range(1, k + 1):
        for i in range(j, n + 1):
            best[j][i] = min(best[j - 1][a] + cost(a, i) for a in range(j - 1, i))
    return min(best[j][n] for j in range(1, k + 1))


# ---- graph prox ------------------------------------------------------------------------------


def graph_prox_slow(y: np.ndarray, edges: np.ndarray, lam: float, p: int, weights: np.ndarray | None = None):
    """min_Z 0.5||Z - Y||^2 + lam sum_e w_e ||z_i - z_j||_p by SLSQP (float64; tiny problems only).

    p = 1: the primal in epigraph form, variables Z [n, D] and t [E, D] with t >= |z_i - z_j|
    elementwise (linear constraints). p = 2: the dual (:func:`graph_prox_dual_slow`): the primal's cone
    constraints t^2 >= ||z_i - z_j||^2 are degenerate exactly where edges fuse (t = 0, z_i = z_j),
    where SLSQP stalls at its iteration limit or finds its linearised constraints incompatible.
    """
    y = np.asarray(y, np.float64)
    n, dim = y.shape
    e = len(edges)
    w = np.ones(e) if weights is None else np.asarray(weights, np.float64)
    if p == 2:
        return graph_prox_dual_slow(y, np.asarray(edges), lam, w)
    nt = e * dim if p == 1 else e
    x0 = np.concatenate([y.ravel(), np.zeros(nt)])
    for ei, (i, j) in enumerate(edges):  # a feasible start
        d = np.abs(y[i] - y[j])
        if p == 1:
            x0[n * dim + ei * dim : n * dim + (ei + 1) * dim] = d
        else:
            x0[n * dim + ei] = np.linalg.norm(d)

    def split(x):
        return x[: n * dim].reshape(n, dim), x[n * dim :]

    def f(x):
        z, t = split(x)
        tw = (t.reshape(e, dim) * w[:, None]).sum() if p == 1 else (t * w).sum()
        return 0.5 * ((z - y) ** 2).sum() + lam * tw

    cons = []
    for ei, (i, j) in enumerate(edges):
        if p == 1:
            for c in range(dim):
                ti = n * dim + ei * dim + c
                cons.append(
                    {"type": "ineq", "fun": lambda x, i=i, j=j, c=c, ti=ti: x[ti] - (x[i * dim + c] - x[j * dim + c])}
                )
                cons.append(
                    {"type": "ineq", "fun": lambda x, i=i, j=j, c=c, ti=ti: x[ti] + (x[i * dim + c] - x[j * dim + c])}
                )
        else:
            ti = n * dim + ei
            cons.append(
                {
                    "type": "ineq",
                    "fun": lambda x, i=i, j=j, ti=ti: (
                        x[ti] ** 2 - ((x[i * dim : (i + 1) * dim] - x[j * dim : (j + 1) * dim]) ** 2).sum()
                    ),
                }
            )
            cons.append({"type": "ineq", "fun": lambda x, ti=ti: x[ti]})
    res = scipy.optimize.minimize(f, x0, method="SLSQP", constraints=cons, options={"ftol": 1e-14, "maxiter": 2000})
    z, _ = split(res.x)
    return z, float(res.fun)


def graph_prox_dual_slow(y: np.ndarray, edges: np.ndarray, lam: float, w: np.ndarray) -> tuple[np.ndarray, float]:
    """The p = 2 graph prox through its dual: min_U 0.5||Y - D^T U||^2 subject to ||u_e||_2 <= lam w_e, by
    SLSQP with exact gradients; then Z = Y - D^T U (strong duality). D is the edge incidence (row e of
    D Z is z_i - z_j for e = (i, j)); U [E, D]. The ball constraints are smooth where they are active."""
    dim = y.shape[1]
    e = len(edges)

    def primal_of(u: np.ndarray) -> np.ndarray:  # Y - D^T U
        u = u.reshape(e, dim)
        z = y.copy()
        np.subtract.at(z, edges[:, 0], u)
        np.add.at(z, edges[:, 1], u)
        return z

    def grad(u: np.ndarray) -> np.ndarray:  # -D (Y - D^T U)
        z = primal_of(u)
        return (z[edges[:, 1]] - z[edges[:, 0]]).ravel()

    def ball(u: np.ndarray) -> np.ndarray:
        return (lam * w) ** 2 - (u.reshape(e, dim) ** 2).sum(1)

    def ball_jac(u: np.ndarray) -> np.ndarray:
        jac = np.zeros((e, e * dim))
        for k in range(e):
            jac[k, k * dim : (k + 1) * dim] = -2 * u[k * dim : (k + 1) * dim]
        return jac

    if lam == 0 or e == 0:
        z = y.copy()
    else:
        res = scipy.optimize.minimize(
            lambda u: 0.5 * (primal_of(u) ** 2).sum(),
            np.zeros(e * dim),
            jac=grad,
            method="SLSQP",
            constraints=[{"type": "ineq", "fun": ball, "jac": ball_jac}],
            options={"ftol": 1e-15, "maxiter": 2000},
        )
        z = primal_of(res.x)
    return z, graph_objective(z, y, edges, lam, 2, w)


def graph_objective(
    z: np.ndarray, y: np.ndarray, edges: np.ndarray, lam: float, p: int, weights: np.ndarray | None = None
) -> float:
    w = np.ones(len(edges)) if weights is None else np.asarray(weights, np.float64)
    pen = sum(w[k] * np.linalg.norm(z[i] - z[j], ord=p) for k, (i, j) in enumerate(edges))
    return 0.5 * float(((z - y) ** 2).sum()) + lam * float(pen)
