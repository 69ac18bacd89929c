"""The fused batched EM of the softmax-gated Gaussian MoE with linear experts (:mod:`moestat.estimators.mle`).

One EM iteration is one pass over the data (:func:`_em_pass`), fused by ``torch.compile`` on the
CPU for large problems; :func:`fit_em` runs it from every start in the loop of
:mod:`moestat.estimators.em_driver` (SQUAREM, retirement, traces), then the Newton polish of
:mod:`moestat.estimators.mle_newton`.  The model and the M-step are described in
:mod:`moestat.estimators.mle`; :mod:`moestat.estimators.mle_generic` fits every other gate and
expert of the protocol.
"""

from __future__ import annotations

import hashlib
import inspect
import math
import os
import platform
import warnings

import numpy as np
import torch

from moestat.devices import compile_cache_dirs, prepare_compile
from moestat.estimators.em_driver import compile_batched, compile_lock, run_em
from moestat.estimators.mle_newton import pack, polish_starts, unpack

__all__ = ["fit_em", "pass_loglik", "COMPILE_MIN_SAMPLES", "expert_wls", "feature_rows", "feature_affine", "feature_firsts",
           "feature_moments"]

_LOG2PI = math.log(2.0 * math.pi)


# ---- sums over the samples against the features xt = (x, 1) -----------------------------------
# Written as products of [B, n] feature rows and a reduction over n, so that under torch.compile
# every moment is one more accumulator of the same loop over the samples (no [B, k, n] temporary
# is written out, and no matmul leaves the fused kernel).  Shared by this module's pass and the
# generic E-step (:mod:`moestat.estimators.mle_generic`).
def feature_rows(Xd: torch.Tensor) -> list:
    """The features of ``xt = (x, 1)`` as ``[B, n]`` rows from ``Xd [B, d, n]``; ``None`` is the constant 1."""
    return [Xd[:, j] for j in range(Xd.shape[1])] + [None]


def _along(x: torch.Tensor, ndim: int) -> torch.Tensor:
    """A feature row ``[B, n]`` shaped to broadcast against a ``[B, ..., n]`` weight of ``ndim`` dimensions."""
    return x.reshape(x.shape[:1] + (1,) * (ndim - 2) + x.shape[1:])


def feature_affine(P: torch.Tensor, xs: list) -> torch.Tensor:
    """``P_i . xt_n`` ``[B, k, n]`` for rows ``P [B, k, p]`` (last entry the intercept)."""
    d = len(xs) - 1
    out = P[..., d : d + 1]
    for j in range(d):
        out = out + P[..., j : j + 1] * _along(xs[j], 3)
    return out


def feature_firsts(w: torch.Tensor, xs: list) -> torch.Tensor:
    """``sum_n w_n xt_n`` ``[..., p]`` for weights ``w [B, ..., n]``."""
    return torch.stack([(w if x is None else w * _along(x, w.ndim)).sum(-1) for x in xs], -1)


def feature_moments(w: torch.Tensor, xs: list) -> torch.Tensor:
    """``sum_n w_n xt_n xt_n^T`` ``[..., p, p]`` for weights ``w [B, ..., n]``, from the upper triangle."""
    p = len(xs)
    cache = {}
    rows = []
    for a in range(p):
        row = []
        for b in range(p):
            if b < a:
                row.append(cache[(b, a)])
                continue
            t = w
            for c in (a, b):
                if xs[c] is not None:
                    t = t * _along(xs[c], w.ndim)
            cache[(a, b)] = t.sum(-1)
            row.append(cache[(a, b)])
        rows.append(torch.stack(row, -1))
    return torch.stack(rows, -2)


# ---- the batched EM ------------------------------------------------------------------------------
# One EM iteration is ONE pass over the data: at the current parameters the pass returns the
# log-likelihood and every sufficient statistic the next M-step needs (moments of the
# responsibilities against x~, of the residuals under the current experts, and of the gate
# probabilities), so the M-step itself is a few [B, k, p, p] solves.  The pass at the candidate
# parameters is at once the acceptance test of the step and the statistics of the next iteration.
# Under ``torch.compile`` the pass is one fused loop over the samples: about 5x faster than the
# same code in eager mode on the CPU (docs/guide/gaussian_moe.rst, "Speed").
#
# Why the atoms are separate [B, n] rows: written over [B, k, n] tensors, the maxima and
# sums over the atoms are reductions along a dimension that is not the samples', and Inductor
# splits the pass into about a dozen loops that write [B, k, n] intermediates to memory and read
# them back -- 80 MB each at B = 50, n = 1e5, so the pass was memory-bound (about 60 ns per sample
# x start in the gmoe_exact sweep).  Over one row per atom (``k`` is a Python int, fixed at
# tracing) every operation is elementwise on [B, n] or a sum over n, and with
# :data:`_FUSE_OPTIONS` every sum is one more accumulator of a single loop over the samples.  The
# arithmetic per element is the same, in the same order, as the [B, k, n] form's.
def _row_affine(P: torch.Tensor, xs: list) -> torch.Tensor:
    """``P_b . xt_n`` ``[B, n]`` for one atom's rows ``P [B, p]`` (last entry the intercept);
    the operations of :func:`feature_affine`, in its order."""
    d = len(xs) - 1
    out = P[:, d : d + 1]
    for j in range(d):
        out = out + P[:, j : j + 1] * xs[j]
    return out


def _row_max(rows: list) -> torch.Tensor:
    out = rows[0]
    for t in rows[1:]:
        out = torch.maximum(out, t)
    return out


def _row_sum(rows: list) -> torch.Tensor:
    out = rows[0]
    for t in rows[1:]:
        out = out + t
    return out


# Two atoms (every exact fit of model 1, the gmoe_exact design): of the rows ``exp(l_i - max_j l_j)``
# one is ``exp(l_top - l_top) = exp(0) = 1`` and the other ``exp(l_other - l_top)``, so one
# exponential per sample gives both, bit for bit the numbers of the k-row form: the same
# differences are formed and a select picks which (the pass takes two such shifted
# exponentials, the gate's and the responsibilities'; 4 exponentials and 2 logarithms per sample
# become 2 and 2).  A NaN row still makes the log-likelihood and every statistic of its entry NaN
# (through the sum of the rows).
def _max_and_shifted_exp(rows: list) -> tuple:
    """``(m, [exp(l_i - m)])`` with ``m = max_i l_i`` for rows ``l_i [B, n]``."""
    if len(rows) == 2:
        d10 = rows[1] - rows[0]
        first = rows[0] >= rows[1]  # row 0 is the maximum (where they tie either: both give 0 and 1)
        u = torch.exp(torch.where(first, d10, rows[0] - rows[1]))
        one = torch.ones_like(u)
        return torch.where(first, rows[0], rows[1]), [torch.where(first, one, u), torch.where(first, u, one)]
    top = _row_max(rows)
    return top, [torch.exp(t - top) for t in rows]


def _shifted_exp(rows: list) -> tuple:
    """``([l_i - m], [exp(l_i - m)])`` with ``m = max_i l_i`` for rows ``l_i [B, n]`` (see above)."""
    if len(rows) == 2:
        first = rows[0] >= rows[1]
        nd = torch.where(first, rows[1] - rows[0], rows[0] - rows[1])  # the row that is not the maximum, shifted
        u = torch.exp(nd)
        zero, one = torch.zeros_like(u), torch.ones_like(u)
        return [torch.where(first, zero, nd), torch.where(first, nd, zero)], [torch.where(first, one, u),
                                                                               torch.where(first, u, one)]
    top = _row_max(rows)
    shifted = [t - top for t in rows]
    return shifted, [torch.exp(t) for t in shifted]


def _em_pass(Xd: torch.Tensor, y: torch.Tensor, V: torch.Tensor, E: torch.Tensor, s2: torch.Tensor):
    """Log-likelihood and the M-step's sufficient statistics at ``(V, E, s2)``.

    Parameters
    ----------
    Xd : Tensor, shape ``[B, d, n]``
    y : Tensor, shape ``[B, n]``
    V, E : Tensor, shape ``[B, k, p]``, ``p = d + 1``
        Gate rows ``(beta1, beta0)`` and experts ``(a, b)``.
    s2 : Tensor, shape ``[B, k]``

    Returns
    -------
    ll : ``[B]``, the observed-data log-likelihood (sum over samples);
    M : ``[B, k, p, p]``, ``sum_n r_i x~ x~^T``;  g : ``[B, k, p]``, ``sum_n r_i e_i x~``;
    q : ``[B, k]``, ``sum_n r_i e_i^2`` (``e_i = y - E_i^T x~``, the residual under the current expert);
    gg : ``[B, k-1, p]``, ``sum_n (r_i - pi_i) x~`` (gradient of ``Q_g`` in the free gate rows);
    H : ``[B, k-1, k-1, p, p]``, ``sum_n pi_i (delta_ij - pi_j) x~ x~^T`` (minus its Hessian).
    """
    k = V.shape[1]
    xs = feature_rows(Xd)
    # softmax and the responsibilities written out (k exponentials and one log each) rather than
    # logsumexp + exp, which costs twice the exponentials in the fused loop
    L = [_row_affine(V[:, i], xs) for i in range(k)]  # k rows [B, n]
    L, z = _shifted_exp(L)
    sz = _row_sum(z)
    pi = [zi / sz for zi in z]
    e = [y - _row_affine(E[:, i], xs) for i in range(k)]
    hl = 0.5 * torch.log(s2)  # [B, k]
    # log pi + log N + log sz + log(2 pi)/2
    lj = [L[i] - hl[:, i : i + 1] - 0.5 * e[i] * e[i] / s2[:, i : i + 1] for i in range(k)]
    m, w = _max_and_shifted_exp(lj)
    sw = _row_sum(w)
    r = [wi / sw for wi in w]
    lln = m + torch.log(sw) - torch.log(sz) - 0.5 * _LOG2PI
    re = [r[i] * e[i] for i in range(k)]
    M = torch.stack([feature_moments(r[i], xs) for i in range(k)], 1)
    g = torch.stack([feature_firsts(re[i], xs) for i in range(k)], 1)
    q = torch.stack([(re[i] * e[i]).sum(-1) for i in range(k)], 1)
    if k == 1:  # no free gate row
        B, p = y.shape[0], len(xs)
        gg, H = y.new_zeros((B, 0, p)), y.new_zeros((B, 0, 0, p, p))
    else:
        gg = torch.stack([feature_firsts(r[i] - pi[i], xs) for i in range(k - 1)], 1)
        # W_ij = pi_i (delta_ij - pi_j): the [B, k-1, k-1, n] weight of the [B, k, n] form, row by row
        H = torch.stack([torch.stack([feature_moments(pi[i] * ((1.0 if i == j else 0.0) - pi[j]), xs) for j in range(k - 1)], 1)
                         for i in range(k - 1)], 1)
    return lln.sum(-1), M, g, q, gg, H


_COMPILED: dict = {}
#: ``compile="auto"`` compiles the pass when ``B * n`` reaches this: compiling costs 5 to 15 s once
#: per process (dynamic shapes: one compilation serves every later size), which a fit of fewer
#: samples x starts does not win back unless it runs thousands of iterations.
COMPILE_MIN_SAMPLES = 50_000

#: Inductor settings under which the compiled :func:`_em_pass` is one loop over the samples (the
#: comment above :func:`_row_affine`).  By default Inductor writes a value read by more than 4
#: others (``realize_reads_threshold``), or one of more than 50 operations / 12 accumulating reads
#: (the CPU thresholds), to memory, and fuses at most 16 reductions side by side
#: (``cpp.max_horizontal_fusion_size``); the pass has about 18 sums per pair of atoms, each reading
#: the responsibilities.  Measured (torch 2.13, one thread, B = 50 x n = 1e5, the project's shared
#: 2-core machine): 12 loops and 24 stores of [B, n] rows with the defaults, 126 ns per sample x
#: start; one loop over the samples with these, 46 ns.  Only the keys this torch knows are passed.
_FUSE_OPTIONS = {
    "realize_reads_threshold": 1000,
    "realize_cpu_opcount_threshold": 10000,
    "realize_cpu_acc_reads_threshold": 1000,
    "cpp.max_horizontal_fusion_size": 64,
}


def _fuse_options() -> dict:
    """:data:`_FUSE_OPTIONS` restricted to the settings of this torch's Inductor (an older one lacks some)."""
    from torch._inductor import config as inductor_config  # loaded by torch.compile in any case

    known = inductor_config.get_config_copy()
    return {key: value for key, value in _FUSE_OPTIONS.items() if key in known}


# ---- the pass compiled ahead of time (AOTInductor) ---------------------------------------------
# Why: a process that calls the pass under ``torch.compile`` pays, even with Inductor's
# caches warm, the import of Inductor, Dynamo's tracing of the pass and the load of the cached code:
# 8.1 s wall in one process on the project's shared 2-core machine (load about 2; Dynamo's
# compile_times: 2.5 s tracing, 2.8 s in the compiler, of which 1.2 s loading the cached module;
# 2.8 s importing Inductor's config), i.e. in every worker of every sweep.  The same pass exported
# once (``torch.export`` with a dynamic batch and sample size) and compiled by AOTInductor with
# the same Inductor settings is a shared library that loads in 0.02 s and returns the same numbers
# bit for bit (``tests/estimators/test_mle_fused.py``).  The package is built once per cache folder
# (under :func:`~moestat.estimators.em_driver.compile_lock`), one per number of atoms, features and
# threads (Inductor writes the thread count into its loops); where the build or the load fails the
# pass is compiled by ``torch.compile`` as before, with one warning.
_AOT: dict = {}
#: the batch and sample size of the example the pass is exported at (both dynamic, at least 2)
_AOT_EXAMPLE = (3, 37)


class _PassModule(torch.nn.Module):
    """:func:`_em_pass` as the module ``torch.export`` takes."""

    def forward(self, Xd, y, V, E, s2):
        return _em_pass(Xd, y, V, E, s2)


def _pass_sources() -> tuple:
    """Every function whose code the compiled pass holds: :func:`_em_pass` and what it calls.  A
    change to any of them names a new package (:func:`_aot_path`); a function added to the pass
    must be added here (the test of the package against the eager pass would catch a stale one)."""
    return (_em_pass, feature_rows, _along, feature_firsts, feature_moments, _row_affine, _row_max, _row_sum,
            _max_and_shifted_exp, _shifted_exp, _PassModule)


def _aot_path(k: int, p: int, threads: int) -> str:
    """The package of the pass for ``k`` atoms and ``p`` features on ``threads`` threads, in
    ``$TORCHINDUCTOR_CACHE_DIR/moestat-aoti``, named by a digest of everything its code depends on:
    the source of the pass (:func:`_pass_sources`), torch's version, :data:`_FUSE_OPTIONS`, the machine and its vector unit."""
    folder = compile_cache_dirs()["TORCHINDUCTOR_CACHE_DIR"]
    digest = hashlib.sha256("".join(inspect.getsource(fn) for fn in _pass_sources()).encode())
    cap = torch.backends.cpu.get_cpu_capability()
    digest.update(repr((torch.__version__, sorted(_FUSE_OPTIONS.items()), k, p, threads, platform.machine(), cap)).encode())
    return os.path.join(folder, "moestat-aoti", f"em_pass-k{k}-p{p}-t{threads}-{digest.hexdigest()[:20]}.pt2")


#: AOTInductor settings of the build that change how fast it is built, not what it computes (so they
#: are not part of the package's name, :func:`_aot_path`).  Precompiled headers (AOTInductor's
#: default) pay off across many builds; the pass is built once per cache folder, where they cost a
#: third of a cold build (the project's 2-core machine, load about 3, a fresh cache folder:
#: 79 s wall and 21.4 + 45.2 CPU-s in this process and the compiler with them, 63 s and 23.6 + 21.8
#: CPU-s without; the two packages return the same numbers bit for bit).  A cold cache is what a
#: fresh machine meets first: every sweep worker waits for this build (:func:`_aot_runner`).
_BUILD_OPTIONS = {"aot_inductor.precompile_headers": False}


def _build_options() -> dict:
    """:data:`_BUILD_OPTIONS` restricted to the settings of this torch's Inductor."""
    from torch._inductor import config as inductor_config  # the build imports Inductor in any case

    known = inductor_config.get_config_copy()
    return {key: value for key, value in _BUILD_OPTIONS.items() if key in known}


def _aot_build(path: str, k: int, p: int) -> None:
    """Export :func:`_em_pass` (dynamic ``B`` and ``n``) and compile it into the package ``path``."""
    from torch._inductor import aoti_compile_and_package  # Inductor: imported only to build the package

    prepare_compile()
    B, n = _AOT_EXAMPLE
    g = torch.Generator().manual_seed(0)  # not torch's global stream

    def draw(*shape: int) -> torch.Tensor:
        return torch.rand(*shape, dtype=torch.float64, generator=g)

    example = (draw(B, p - 1, n), draw(B, n), draw(B, k, p), draw(B, k, p), draw(B, k) + 0.5)
    Bd, nd = torch.export.Dim("B", min=2), torch.export.Dim("n", min=2)
    dims = {"Xd": {0: Bd, 2: nd}, "y": {0: Bd, 1: nd}, "V": {0: Bd}, "E": {0: Bd}, "s2": {0: Bd}}
    program = torch.export.export(_PassModule(), example, dynamic_shapes=dims, strict=False)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path[:-4]}.{os.getpid()}.tmp.pt2"  # written whole, then renamed: a reader never sees half a package
    try:
        aoti_compile_and_package(program, package_path=tmp, inductor_configs={**_fuse_options(), **_build_options()})
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def _private_loader():
    """torch's private ``AOTIModelPackageLoader`` class, or ``None`` where this torch has none."""
    return getattr(getattr(torch._C, "_aoti", None), "AOTIModelPackageLoader", None)


def _load_package(path: str):
    """The package at ``path`` as a function of the list of the pass's tensors, returning its outputs.

    Why the private loader first: the public ``torch._inductor.aoti_load_package``
    loads the same package through the same class, but importing ``torch._inductor`` costs about
    1.7 CPU-s and 970 modules per process (measured with torch 2.13 on the project's 2-core
    machine: 1.57-1.70 CPU-s import and 0.21-0.24 CPU-s load, against under 0.01 s for the class
    itself), in every worker of a sweep.  The public function is the fallback where a torch
    lacks the class or changed its signature; where both fail, :func:`_aot_runner` falls back to
    ``torch.compile``.
    """
    loader = _private_loader()
    if loader is not None:
        try:
            return loader(path, "model", False, 1, -1).run
        except TypeError:  # another signature: the public loader knows it
            pass
    from torch._inductor import aoti_load_package  # imports Inductor: only here (see above)

    model = aoti_load_package(path)
    return lambda args: model(*args)


def _aot_runner(k: int, p: int):
    """The loaded package of the pass (:func:`_aot_path`), built first if missing, as a function of
    the list of the pass's tensors (:func:`_load_package`); ``None`` where AOTInductor is
    unavailable (one warning; the caller compiles with ``torch.compile``)."""
    key = (k, p, torch.get_num_threads())
    if key not in _AOT:
        runner = None
        try:
            path = _aot_path(*key)
            if not os.path.exists(path):
                with compile_lock():  # one build per cache folder; the processes that waited load it
                    if not os.path.exists(path):
                        _aot_build(path, k, p)
            runner = _load_package(path)
        except Exception as exc:  # noqa: BLE001 - any failure of an optional fast path: torch.compile instead
            warnings.warn(f"the ahead-of-time compiled EM pass is unavailable ({type(exc).__name__}: {exc}); "
                          "the pass is compiled by torch.compile", RuntimeWarning, stacklevel=2)
        _AOT[key] = runner
    return _AOT[key]


def _compiled_pass(device: torch.device):
    """The compiled pass: on the CPU the AOTInductor package (:func:`_aot_runner`), elsewhere -- or
    where that is unavailable -- ``torch.compile`` (:func:`~moestat.estimators.em_driver.compile_batched`,
    created on first need: creating it imports Inductor)."""
    dynamo: list = []

    def by_dynamo(*args):
        if not dynamo:
            options = _fuse_options() if device.type == "cpu" else {}
            dynamo.append(compile_batched(_em_pass, fullgraph=True, **({"options": options} if options else {})))
        return dynamo[0](*args)

    def run(Xd, y, V, E, s2):
        runner = _aot_runner(V.shape[1], V.shape[2]) if Xd.device.type == "cpu" else None
        if runner is None:
            return by_dynamo(Xd, y, V, E, s2)
        if Xd.shape[2] < 2:  # exported for n >= 2 (a fit has at least 2 samples)
            return by_dynamo(Xd, y, V, E, s2)
        args = [t.contiguous() for t in (Xd, y, V, E, s2)]  # the package's layout (a no-op for the EM's tensors)
        if Xd.shape[0] == 1:  # exported for B >= 2: a lone entry twice over, its first copy kept
            return tuple(o[:1] for o in runner([torch.cat([t, t]) for t in args]))
        return tuple(runner(args))

    return run


def _pass_function(compile: bool | str, size: int, device: torch.device):
    """The pass to use: compiled (fused loops; :func:`_compiled_pass`) or eager; ``(function, "compiled" | "eager")``.

    ``compile``: ``True`` (always), ``"auto"`` (on the CPU from ``size = B n >=``
    :data:`COMPILE_MIN_SAMPLES`), ``"all"`` (on the CPU, any size: a large sweep's fits,
    :func:`~moestat.estimators.em_driver.sweep_compile`) or ``False``."""
    want = compile is True or (device.type == "cpu" and (compile == "all" or (compile == "auto" and size >= COMPILE_MIN_SAMPLES)))
    if not want:
        return _em_pass, "eager"
    if "fn" not in _COMPILED:
        _COMPILED["fn"] = _compiled_pass(device)
    return _COMPILED["fn"], "compiled"


def expert_wls(M: torch.Tensor, g: torch.Tensor, q: torch.Tensor, n: int):
    """The exact M-step of linear experts (weighted least squares) in residual form, from the sums
    ``M = sum_n r xt xt^T`` ``[B, k, p, p]``, ``g = sum_n r e xt`` ``[B, k, p]`` and ``q = sum_n r e^2``
    ``[B, k]`` over the residuals ``e`` under the current experts.  Shared with the generic EM.

    Returns
    -------
    delta : ``[B, k, p]``, the correction to the current experts ``M^-1 g``; zero where the atom is
        empty (mass at most ``1e-8 n``) or the solve failed, so that atom keeps its expert.
    wss : ``[B, k]``, ``sum_n r (e - delta^T xt)^2`` after the correction.
    ok : ``[B, k]``, where the correction was made.
    """
    p = M.shape[-1]
    eye = torch.eye(p, dtype=M.dtype, device=M.device)
    # a relative ridge of 1e-12 only guards exactly singular systems (an atom on < p distinct x)
    tr = M.diagonal(dim1=-2, dim2=-1).sum(-1)
    delta, info = torch.linalg.solve_ex(M + (1e-12 * tr + 1e-300)[..., None, None] * eye, g.unsqueeze(-1))
    delta = delta.squeeze(-1)
    ok = (info == 0) & (M[..., p - 1, p - 1] > 1e-8 * n) & torch.isfinite(delta).all(-1)
    delta = torch.where(ok.unsqueeze(-1), delta, torch.zeros_like(delta))  # an empty atom keeps its expert
    # sum_n r (e - delta^T xt)^2 = q - 2 delta^T g + delta^T M delta = q - delta^T g, as M delta = g
    return delta, (q - (delta * g).sum(-1)).clamp_min(0.0), ok


def _m_step(stats, V, E, s2, floor, shared: bool, n: int):
    """Experts (weighted least squares on the residuals), floored variances, and the gate's Newton step.

    Returns ``E, s2`` (the exact maximisers of the expected complete-data log-likelihood over the
    experts and the floored variances) and the Newton direction ``[B, k-1, p]`` of ``Q_g``.
    """
    _, M, g, q, gg, H = stats
    B, k, p = E.shape
    delta, wss, ok = expert_wls(M, g, q, n)
    mass = M[..., p - 1, p - 1]
    E = E + delta
    if shared:
        new = (wss.sum(-1, keepdim=True) / n).expand(-1, k)
    else:
        new = torch.where(ok, wss / mass.clamp_min(1e-300), s2)
    s2 = torch.maximum(new, floor.unsqueeze(-1))
    if k == 1:
        return E, s2, torch.zeros_like(V[:, :0])
    m = (k - 1) * p
    Hm = H.permute(0, 1, 3, 2, 4).reshape(B, m, m)
    trh = Hm.diagonal(dim1=-2, dim2=-1).sum(-1)
    Hm = Hm + (1e-10 * trh / m + 1e-300)[:, None, None] * torch.eye(m, dtype=H.dtype, device=H.device)
    step, info = torch.linalg.solve_ex(Hm, gg.reshape(B, m, 1))
    ok = (info == 0) & torch.isfinite(step).all(-2).squeeze(-1)
    step = torch.where(ok[:, None], step.squeeze(-1), torch.zeros_like(step.squeeze(-1)))
    return E, s2, step.reshape(B, k - 1, p)


def _with_gate_step(V, step, t):
    """``V`` with ``t * step`` added to its free rows (the reference row stays 0)."""
    out = V.clone()
    out[:, :-1] += t[:, None, None] * step
    return out


_MAX_HALVINGS = 30


class _FusedSteps:
    """The fused EM's hooks for :func:`moestat.estimators.em_driver.run_em`: the state is ``(V, E,
    s2)`` (``[B, k, p]``, ``[B, k, p]``, ``[B, k]``), the posterior the statistics of
    :func:`_em_pass`, SQUAREM's coordinates ``(V_1..V_{k-1}, E, log s2)`` (:func:`~moestat.estimators.mle_newton.pack`).

    Parameters
    ----------
    em_pass : callable
        :func:`_em_pass` or its compiled form (:func:`_pass_function`).
    Xd : Tensor, shape ``[B, d, n]``
    ya : Tensor, shape ``[B, n]``
    fa : Tensor, shape ``[B]``
        Variance floor of every entry.
    shared : bool
    kernel : {"compiled", "eager"}
    """

    name = "the EM pass"

    def __init__(self, em_pass, Xd, ya, fa, shared: bool, kernel: str) -> None:
        self.em_pass, self.Xd, self.ya, self.fa, self.shared, self.kernel = em_pass, Xd, ya, fa, shared, kernel
        self.n = Xd.shape[-1]

    def estep(self, st):
        stats = self.em_pass(self.Xd, self.ya, *st)
        return stats[0], stats

    def step(self, st, stats):
        """One EM iteration: M-step, the gate's Newton step halved on the log-likelihood (:func:`fit_em`)."""
        Va, Ea, s2a = st
        ll, n = stats[0], self.n
        E1, s21, step = _m_step(stats, Va, Ea, s2a, self.fa, self.shared, n)
        t = torch.ones(Va.shape[0], dtype=Va.dtype, device=Va.device)
        V1 = _with_gate_step(Va, step, t)
        new = list(self.em_pass(self.Xd, self.ya, V1, E1, s21))
        # rounding allowance: a step that changes nothing may lower the sum of n logs in its last bits
        slack = 1e-13 * (ll.abs() + n)
        for h in range(_MAX_HALVINGS + 1):
            low = ~(new[0] >= ll - slack)  # NaN counts as low
            if not bool(low.any()):
                break
            idx = torch.nonzero(low).flatten()
            t[idx] = 0.0 if h == _MAX_HALVINGS else t[idx] * 0.5
            V1[idx] = _with_gate_step(Va[idx], step[idx], t[idx])
            sub = self.em_pass(self.Xd[idx], self.ya[idx], V1[idx], E1[idx], s21[idx])
            for a, b in zip(new, sub):
                a[idx] = b
        return (V1, E1, s21), new[0], tuple(new)

    def to_vector(self, st):
        return pack(*st)  # the Newton polish's coordinates (one layout), per-atom log-variances

    def from_vector(self, ext, like):
        k, p = like[0].shape[1], like[0].shape[2]
        Vx, Ex, s2x = unpack(ext, k, p)
        return Vx, Ex, torch.maximum(s2x, self.fa.unsqueeze(-1))

    def compact(self, keep):
        # index_select: the same rows as indexing, copied in one pass (measured 0.67x the time at B = 50, n = 1e5)
        self.Xd, self.ya, self.fa = (torch.index_select(t, 0, keep) for t in (self.Xd, self.ya, self.fa))

    def eager(self) -> "_FusedSteps":
        _COMPILED["fn"] = _em_pass  # no second attempt in this process
        self.em_pass, self.kernel = _em_pass, "eager"
        return self


def _start_variances(Xd, ya, V, E, shared: bool):
    """The responsibility-weighted residual variances under a start ``[B, k]`` (one pooled value for
    ``shared``): ``sum_n pi_i (y - E_i^T xt)^2 / sum_n pi_i`` with the gate's ``pi`` for weights."""
    n, k = ya.shape[1], V.shape[1]
    ones = torch.ones_like(ya).unsqueeze(-1)
    Xe = torch.cat([Xd.transpose(1, 2), ones], -1)  # [B, n, p]
    pi = torch.softmax(Xe @ V.transpose(1, 2), -1).transpose(1, 2)
    wr2 = pi * (ya.unsqueeze(1) - (Xe @ E.transpose(1, 2)).transpose(1, 2)) ** 2
    if shared:
        return (wr2.sum((1, 2)) / n).unsqueeze(-1).expand(-1, k)
    return wr2.sum(-1) / pi.sum(-1).clamp_min(1e-300)


def _pass_layout(X: torch.Tensor, rep: torch.Tensor | None = None) -> torch.Tensor:
    """``X [R, n, d]`` (its entries ``rep [B]``, default all) as the pass's ``Xd [B, d, n]``, with the
    default strides also for d = 1 (a compiled pass is specialised on strides)."""
    R, n, d = X.shape
    if rep is None:
        return torch.empty((R, d, n), dtype=X.dtype, device=X.device).copy_(X.transpose(1, 2))
    # gathered straight into the new layout: one copy (indexing, then copying, made two)
    out = torch.empty((rep.shape[0], d, n), dtype=X.dtype, device=X.device)
    return torch.index_select(X.transpose(1, 2), 0, rep, out=out)


def pass_loglik(X: torch.Tensor, Y: torch.Tensor, V: torch.Tensor, E: torch.Tensor, s2: torch.Tensor,
                kernel: str) -> np.ndarray:
    """The observed-data log-likelihood ``[B]`` of given parameters by the EM pass of ``kernel``.

    What a fit of this module records as ``loglik`` for its final parameters is this pass's
    value; evaluating another measure (the truth of a simulation, :mod:`moestat.rates.truth_check`)
    by the same pass compares the two with the same arithmetic.  Why not the eager
    :func:`moestat.model.gaussian_moe.log_likelihood`: on ``[B, n, k]`` tensors with
    ``k = 2`` its softmax and log-sum-exp reduce along a dimension of two, about 290 ns per sample
    on the project's 2-core machine; the compiled pass is one loop over the samples.

    Parameters
    ----------
    X : Tensor, shape ``[B, n, d]``
    Y : Tensor, shape ``[B, n]``
    V, E : Tensor, shape ``[B, k, d + 1]``
        Gate rows ``(beta1, beta0)`` (last row 0) and experts ``(a, b)``.
    s2 : Tensor, shape ``[B, k]``
    kernel : {"compiled", "eager"}
        The pass of a fit (``MLEGaussianMoE.kernel_``): ``"compiled"`` calls this process's
        compiled pass (compiled on first use), ``"eager"`` :func:`_em_pass` itself.

    Returns
    -------
    ndarray, shape ``[B]`` (float64)
    """
    if kernel not in ("compiled", "eager"):
        raise ValueError(f"kernel must be 'compiled' or 'eager', got {kernel!r}")
    fn, _ = _pass_function(kernel == "compiled", 0, X.device)
    ll = fn(_pass_layout(X), Y.contiguous(), V.contiguous(), E.contiguous(), s2.contiguous())[0]
    return ll.cpu().numpy()


def fit_em(X, Y, V, E, s2=None, *, shared=False, max_iter=1000, tol=1e-10, var_floor=1e-6, compile="auto",
           accelerate: bool = False, polish_iter: int = 0, compile_size: int | None = None) -> dict:
    """Batched EM from ``S`` starts per replicate, run by :func:`moestat.estimators.em_driver.run_em`.

    Each iteration: the experts and variances by their exact M-step (weighted least squares on
    the residuals, floored variances), the gate by one Newton step of ``Q_g`` (IRLS), halved until
    the observed log-likelihood does not decrease (at most 30 halvings; then the gate keeps its
    value and the update of the experts alone, an exact EM step, cannot decrease it).  Every
    accepted iterate is evaluated by :func:`_em_pass`, which also gives the next M-step's statistics.

    Parameters
    ----------
    X : Tensor, shape ``[R, n, d]``
    Y : Tensor, shape ``[R, n]``
    V, E : Tensor, shape ``[R, S, k, d + 1]``
        Gate ``(beta1, beta0)`` (last row 0) and experts ``(a, b)`` of every start.
    s2 : Tensor, shape ``[R, S, k]``, optional
        Starting variances; default (and always with ``shared``) the responsibility-weighted
        residual variances under the start.
    compile : bool, "auto" or "all"
        Fuse the pass (:func:`_compiled_pass`: AOTInductor on the CPU, else ``torch.compile``;
        ``"auto"``: on the CPU for ``R S n >=``
        :data:`COMPILE_MIN_SAMPLES`; ``"all"``: on the CPU, any size).  Without a working compiler the eager pass is used and
        ``"eager"`` is reported.
    accelerate : bool
        SQUAREM (Varadhan & Roland 2008) between pairs of EM steps (:mod:`moestat.estimators.em_driver`).
    polish_iter : int
        Newton iterations (:func:`moestat.estimators.mle_newton.polish_starts`) for every finite start
        after EM; one that reaches the Newton-decrement certificate gets status ``"newton"``, the
        others keep EM's.  0 (default): none.
    compile_size : int or None
        The size ``"auto"`` compares with :data:`COMPILE_MIN_SAMPLES` (default ``R S n``): a chunk
        of a larger batch passes the whole batch's, so that it runs the pass the whole batch would
        (:class:`~moestat.estimators.mle.MLEGaussianMoE`'s ``max_memory``).

    Returns
    -------
    dict
        NumPy, flat over ``B = R S`` (replicate-major): ``V, E [B, k, p]``, ``s2 [B, k]``,
        ``loglik [B]``, ``n_iter [B]`` (EM iterations plus accepted Newton steps), ``n_newton
        [B]``, ``status`` (list), ``paths`` (list of ``[n_iter + 1]``), ``kernel`` (``"compiled"``
        or ``"eager"``).
    """
    R, n, d = X.shape
    S, k, p = V.shape[1], V.shape[2], d + 1
    B = R * S
    rep = torch.arange(R, device=X.device).repeat_interleave(S)
    Xd = _pass_layout(X, rep)
    ya = Y[rep].contiguous()
    fa = (var_floor * Y.var(dim=1).clamp_min(1e-300))[rep]
    V, E = V.reshape(B, k, p).clone(), E.reshape(B, k, p).clone()
    if s2 is None or shared:  # a shared-variance EM starts inside its model: one pooled variance
        s2 = _start_variances(Xd, ya, V, E, shared)
    s2 = torch.maximum(s2.reshape(B, k), fa.unsqueeze(-1)).clone()
    em_pass, kernel = _pass_function(compile, B * n if compile_size is None else int(compile_size), X.device)
    steps = _FusedSteps(em_pass, Xd, ya, fa, shared, kernel)
    out = run_em(steps, (V, E, s2), n=n, max_iter=max_iter, tol=tol, accelerate=accelerate, compile=compile)
    (V, E, s2), status, paths = out["state"], out["status"], out["paths"]
    n_newton = np.zeros(B, dtype=int)
    if polish_iter > 0:
        n_newton = polish_starts(X, Y, rep, V, E, s2, status, paths, var_floor=var_floor, tol=tol,
                                 max_iter=int(polish_iter), shared=shared)
    return {
        "V": V.cpu().numpy(), "E": E.cpu().numpy(), "s2": s2.cpu().numpy(),
        "loglik": np.array([pth[-1] for pth in paths]), "n_iter": np.array([len(pth) - 1 for pth in paths]),
        "status": status, "n_newton": n_newton,
        "paths": [np.array(pth) for pth in paths], "kernel": out["steps"].kernel,
    }
