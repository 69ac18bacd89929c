"""The batched EM loop, written once: an active set with per-entry retirement and statuses, SQUAREM
acceleration, the compile fallback and the log-likelihood traces.

Every EM of the package that iterates a fixed-point map over a batch of independent entries
(replicates x starts) runs here; an EM supplies only its steps (:class:`EMSteps`), in the manner of
scikit-learn's ``mixture/_base.py`` (the loop in one place, small hooks for the E-step and the
M-step).  The fused EM of the linear softmax gate (:mod:`moestat.estimators.mle_fused`) and the
generic EM of every other gate and expert (:mod:`moestat.estimators.mle_generic`) are its two users.

One iteration of :func:`run_em` from the active parameters ``theta`` (an entry that has stopped
leaves the batch: compaction, so the slowest entry alone sets the cost of the last iterations):

* **plain**: ``theta <- M(theta)``, one EM (or generalised EM) step;
* **accelerated** (SQUAREM, Varadhan & Roland 2008, scheme SqS3): two steps ``theta1 = M(theta0)``,
  ``theta2 = M(theta1)``, then with ``r = theta1 - theta0``, ``v = theta2 - 2 theta1 + theta0`` and
  ``alpha = -max(1, |r| / |v|)`` the squared extrapolation ``theta0 - 2 alpha r + alpha^2 v`` (the
  step length of their scheme S3, clamped at ``alpha <= -1``, where ``alpha = -1`` is ``theta2``
  itself), kept only where it is finite and at least as likely as ``theta2`` -- so every recorded
  value is at least the last one and the trace stays monotone.

Stopping (per entry): the log-likelihood is not finite (status ``"nonfinite"``) or changed by at most
``tol * n`` in the last EM step (``"tol"``; with SQUAREM the change ``theta1 -> theta2``, never an
extrapolation's, which may gain little far from the optimum); ``"max_iter"`` otherwise.

Host synchronisation: the loop reads the retirement mask and the traces on the host once per
iteration.  Deferring that (a mask kept on the device, checked every few iterations) would save
little as long as the steps synchronise themselves -- the fused EM's step halving and the generic
EM's damped ascent test ``any()`` per trial -- and freezing retired entries in place instead of
compacting them would spend a step on each; the per-iteration check also keeps every fit equal to
the one before this loop was shared.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from typing import Any, Callable, Iterator, Protocol

import torch

from moestat.devices import prepare_compile

__all__ = ["EMSteps", "run_em", "retire_finished", "take_entries", "where_entries", "compile_batched", "compile_lock", "first_estep",
           "sweep_compile", "SWEEP_COMPILE_MIN_SAMPLES"]


class EMSteps(Protocol):
    """The hooks of one batched EM (every tensor has the batch of active entries first).

    A *state* is a tuple of tensors (a ``NamedTuple`` is kept as its type): the parameters of the
    active entries and whatever per-entry values a step carries (a damping).  A *posterior* is the
    E-step's output at a state, a tuple of tensors or ``None``, which the next step consumes.
    """

    #: what the compile-fallback warning names ("the EM pass", "the generic EM")
    name: str

    def estep(self, state) -> tuple[torch.Tensor, Any]:
        """Observed log-likelihood ``[B]`` and the posterior at ``state``."""

    def step(self, state, post) -> tuple[Any, torch.Tensor, Any]:
        """One EM iteration from ``state`` (with its posterior ``post``): the new state, its
        log-likelihood ``[B]`` and its posterior."""

    def to_vector(self, state) -> torch.Tensor:
        """The unconstrained coordinates ``[B, m]`` that SQUAREM extrapolates in."""

    def from_vector(self, vec: torch.Tensor, like) -> Any:
        """The state at coordinates ``vec [B, m]`` (floors applied), other values taken from ``like``."""

    def compact(self, keep: torch.Tensor) -> None:
        """Keep the data of the active entries at positions ``keep`` only."""

    def eager(self) -> "EMSteps":
        """The same steps without ``torch.compile`` (after a failed compilation)."""


def _rebuild(like, items):
    """A tuple of ``items`` of the type of ``like`` (a ``NamedTuple`` is rebuilt field by field)."""
    return type(like)(*items) if hasattr(like, "_fields") else tuple(items)


def take_entries(x, idx: torch.Tensor):
    """The entries ``idx`` of every tensor of the tuple ``x`` (``None``, as ``x`` or an item, stays ``None``)."""
    if x is None:
        return None
    return _rebuild(x, (None if a is None else a[idx] for a in x))


def where_entries(mask: torch.Tensor, a, b):
    """Per entry ``a`` where ``mask [B]`` holds, else ``b``, for two tuples of tensors of one layout
    (or two ``None``)."""
    if a is None:
        return None
    return _rebuild(a, (None if u is None else torch.where(mask.reshape((-1,) + (1,) * (u.dim() - 1)), u, w)
                        for u, w in zip(a, b)))


def retire_finished(ll: torch.Tensor, change: torch.Tensor, tol_n: float, act: torch.Tensor,
                    status: list) -> torch.Tensor | None:
    """The stopping rule (module docstring) of the active entries.

    Parameters
    ----------
    ll : Tensor, shape ``[B]``
        The log-likelihood kept at each entry (not finite: status ``"nonfinite"``).
    change : Tensor, shape ``[B]``
        Its change in the last EM step (at most ``tol_n`` in absolute value: status ``"tol"``).
    act : Tensor, shape ``[B]``
        The entries' indices into ``status``.

    Returns
    -------
    Tensor or None
        Positions (into the active batch) of the entries still running; ``None`` when none finished.
    """
    bad = ~torch.isfinite(ll)
    done = bad | (change.abs() <= tol_n)
    if not bool(done.any()):
        return None
    for j in torch.nonzero(done).flatten().tolist():
        status[int(act[j])] = "nonfinite" if bool(bad[j]) else "tol"
    return torch.nonzero(~done).flatten()


def _record(paths: list, act: torch.Tensor, ll: torch.Tensor, mask: torch.Tensor | None = None) -> None:
    """Append ``ll [B]`` to the traces of the active entries (where ``mask`` holds)."""
    vals = ll.tolist()
    keep = [True] * len(vals) if mask is None else mask.tolist()
    for b, v, m in zip(act.tolist(), vals, keep):
        if m:
            paths[b].append(v)


#: The lock file, in Inductor's cache folder, that serialises the first call (the compilation) of
#: every :func:`compile_batched` function across the processes sharing that cache.
COMPILE_LOCK_NAME = "moestat-compile.lock"


@contextlib.contextmanager
def compile_lock() -> Iterator[None]:
    """Hold an exclusive lock on :data:`COMPILE_LOCK_NAME` in ``$TORCHINDUCTOR_CACHE_DIR``.

    Why: every worker of a sweep compiles the same EM pass.  On a cold cache each one
    compiled it from scratch at the same time -- measured on the project's 2-core machine (loaded),
    a scaled ``gmoe_exact`` sweep took 43.9 CPU-s with 2 workers and 68.9 CPU-s with 8 workers on
    a cold cache against 23.1 CPU-s warm and 12.4 CPU-s eager (``docs/guide/performance.rst``).
    Under the lock the first process compiles and writes Inductor's cache; the others wait
    (asleep, not computing) and then load the compiled code from the warm cache, which costs a
    fraction of a cold compilation.  The kernel lets the lock go when its holder dies, so a killed
    worker cannot block the others.  Where ``fcntl`` is missing (Windows) or the folder is not
    writable, nothing is locked: the processes then compile side by side, as before.
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    folder = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    fd = None
    if folder:
        try:
            os.makedirs(folder, exist_ok=True)
            fd = os.open(os.path.join(folder, COMPILE_LOCK_NAME), os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:  # a read-only cache: compile unlocked
            fd = None
    if fd is None:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def _compiled_marker(fn: Callable) -> str | None:
    """The file that says ``fn`` was compiled once into this cache folder (by this torch), or ``None``.

    Only the first compilation in a cache folder needs :func:`compile_lock`; once it has written
    the cache, the others may load it at the same time.  A marker whose cache entry is gone (the
    folder pruned) only costs a compilation without the lock, as before."""
    folder = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if not folder:
        return None
    name = f"{fn.__module__}.{getattr(fn, '__qualname__', fn)}.torch-{torch.__version__}"
    return os.path.join(folder, COMPILE_LOCK_NAME + "." + "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in name))


def compile_batched(fn: Callable, lead: int = 0, **options) -> Callable:
    """``fn`` under ``torch.compile`` with dynamic shapes (one compilation per process serves every
    later size), for functions of batched tensors.

    The batch shrinks to 1 as entries stop; dynamo would specialise on ``B = 1`` and compile again
    (~10 s), so a lone entry is run twice over and its first copy kept.  ``lead``: how many leading
    arguments are not batched tensors; ``options`` go to :func:`torch.compile`.

    The first call (where dynamo traces and Inductor compiles) of the first process to compile
    ``fn`` into this cache folder holds :func:`compile_lock`; the processes that meet the lock wait
    for it and then find a warm cache, and load it side by side (:func:`_compiled_marker`).
    """
    prepare_compile()  # Inductor's caches under ~/.cache/moestat, not $TMPDIR
    c = torch.compile(fn, dynamic=True, **options)
    compiled = []  # non-empty once the first call returned

    def call(*args):
        if compiled:
            return c(*args)
        done = _compiled_marker(fn)
        if done is None or not os.path.exists(done):
            with compile_lock():
                # the processes that queued here while the first one compiled find its marker and
                # go on without the lock: they load the cached code side by side, not one by one
                if done is None or not os.path.exists(done):
                    out = c(*args)
                    compiled.append(True)
                    if done is not None:
                        with contextlib.suppress(OSError):
                            open(done, "w").close()
                    return out
        out = c(*args)
        compiled.append(True)
        return out

    def run(*args):
        head, ts = args[:lead], args[lead:]
        if ts[0].shape[0] == 1:
            out = call(*head, *(torch.cat([t, t]) for t in ts))
            return torch.utils._pytree.tree_map(lambda o: None if o is None else o[:1], out)
        return call(*args)

    return run


#: A sweep compiles its EM fits when its units hold at least this many samples x starts in all
#: (:func:`sweep_compile`).  Measured (``docs/guide/performance.rst``; the project's
#: 2-core machine, one thread): a cold compilation of the fused EM pass costs about 25 CPU-s
#: (``fit_em`` of 10 x 5 entries, n = 2 000: 25.3 s user + 3.3 s system compiled against 3.9 s
#: eager), loading it from a warm cache about 5 CPU-s per process; an exact-fit unit of the
#: ``gmoe_exact`` design fits in about 0.8 microseconds per sample x start eagerly (0.41 s for
#: 10 x 5 entries at n = 10 000, about 5 EM iterations) and the compiled pass is 5 to 8 times
#: faster per iteration (251 against 30 ns per sample x start at n = 20 000).  Compiling saves
#: about 0.65 microseconds per sample x start, so one cold compilation pays from about 4e7.
#: Since the fused pass is compiled ahead of time (:mod:`moestat.estimators.mle_fused`, an
#: AOTInductor package built once per cache folder), a warm process loads it in about 0.02 s
#: instead of about 5 CPU-s; the threshold is kept, so that a smaller sweep keeps its eager rows.
SWEEP_COMPILE_MIN_SAMPLES = 40_000_000


def sweep_compile(total_samples: int, device: str = "cpu") -> bool | str:
    """The ``compile`` argument for every EM fit of a sweep: one decision for all its units.

    ``"all"`` when the whole sweep is large enough to win a cold compilation back
    (:data:`SWEEP_COMPILE_MIN_SAMPLES`), else ``False`` (eager).  ``"all"`` compiles every fit of
    the fused EM whatever its size, with the eager fallback of ``"auto"`` (the generic EM reads it
    as ``"auto"``).  Why every fit: the pass is compiled ahead of time and loads in
    about 0.02 s, so the per-fit threshold of ``"auto"``
    (:data:`~moestat.estimators.mle_fused.COMPILE_MIN_SAMPLES`) only left the units below
    ``n = 1 000`` of the ``gmoe_exact`` design (a third of them) to the eager pass, about 5 ms per
    pass of Python dispatch where the compiled one takes under 1 ms.
    The decision depends on the design only -- never on ``n_jobs``, the backend or the order in
    which units run -- so the rows stay the same whatever runs them.  Per fit, ``"auto"`` alone
    compiled every unit of 10 replicates x 5 starts from n = 1 000 on, in every worker, although
    such a fit takes well under a second eagerly.

    Parameters
    ----------
    total_samples : int
        Sum over the sweep's units of replicates x starts x n.
    device : str
        The sweep's device; only the CPU compiles (as ``"auto"`` does per fit).
    """
    return "all" if str(device).startswith("cpu") and int(total_samples) >= SWEEP_COMPILE_MIN_SAMPLES else False


def first_estep(steps: EMSteps, state, compile) -> tuple[EMSteps, torch.Tensor, Any]:
    """The E-step at the starts, falling back to the eager steps (:meth:`EMSteps.eager`, one
    ``RuntimeWarning``) when ``torch.compile`` has no working backend -- unless ``compile is True``
    asked for it, where the error propagates.  Returns the steps used, the log-likelihood and the
    posterior."""
    try:
        return (steps, *steps.estep(state))
    except torch._dynamo.exc.BackendCompilerFailed as exc:  # no working C++ compiler: the same steps, eager
        if compile is True:
            raise
        warnings.warn(f"torch.compile is unavailable ({type(exc).__name__}); {steps.name} runs eagerly", RuntimeWarning)
        steps = steps.eager()
        return (steps, *steps.estep(state))


def _squarem(steps: EMSteps, st, post, tol_n: float, act: torch.Tensor, paths: list):
    """Two EM steps and their SQUAREM extrapolation (module docstring) of the active entries.

    Returns the state and posterior kept, the log-likelihood kept ``[B]`` and the change of the
    second EM step ``[B]`` (the stopping rule's)."""
    s1, l1, p1 = steps.step(st, post)
    s2, l2, p2 = steps.step(s1, p1)
    t0, t1, t2 = steps.to_vector(st), steps.to_vector(s1), steps.to_vector(s2)
    r, v = t1 - t0, t2 - 2 * t1 + t0
    alpha = -(r.norm(dim=1) / v.norm(dim=1).clamp_min(1e-300)).clamp_min(1.0)
    sx = steps.from_vector(t0 - 2 * alpha[:, None] * r + alpha[:, None] ** 2 * v, s2)
    lx, px = steps.estep(sx)
    # not at a converged pair of steps, and no worse than the second step
    take = torch.isfinite(lx) & (lx >= l2) & ((l2 - l1).abs() > tol_n)
    _record(paths, act, l1)
    _record(paths, act, l2)
    _record(paths, act, lx, take)
    return where_entries(take, sx, s2), where_entries(take, px, p2), torch.where(take, lx, l2), l2 - l1


def run_em(steps: EMSteps, state, *, n: int, max_iter: int, tol: float, accelerate: bool = False,
           compile: bool | str = False) -> dict:
    """Iterate ``steps`` from ``state`` over a batch of ``B`` independent entries (module docstring).

    Parameters
    ----------
    steps : EMSteps
        The EM's hooks, holding the data of all ``B`` entries (compacted here as entries stop).
    state : tuple of Tensor
        The starts, every tensor ``[B, ...]``.
    n : int
        Samples per entry (the stopping rule is per sample: ``tol * n``).
    max_iter : int
        EM steps per entry (a SQUAREM round counts two).
    tol : float
    accelerate : bool
        SQUAREM between pairs of EM steps.
    compile : bool, "auto" or "all"
        What the caller asked for (only ``True`` forbids the eager fallback).

    Returns
    -------
    dict
        ``state`` (the final state of every entry, the tuple's tensors ``[B, ...]``), ``status``
        (list of ``B`` str), ``paths`` (list of ``B`` lists: the log-likelihood at the start and
        after every EM step and every kept extrapolation) and ``steps`` (the steps used: eager
        after a compile fallback).
    """
    full = _rebuild(state, (a.clone() for a in state))
    B = full[0].shape[0]
    st = take_entries(full, torch.arange(B, device=full[0].device))  # a copy: full is written into below
    steps, ll, post = first_estep(steps, st, compile)
    status = ["max_iter"] * B
    paths: list[list[float]] = [[] for _ in range(B)]
    act = torch.arange(B, device=full[0].device)
    _record(paths, act, ll)
    tol_n = tol * n
    it = 0
    while act.numel() and it < max_iter:
        if accelerate:
            it += 2
            st, post, ll, change = _squarem(steps, st, post, tol_n, act, paths)
        else:
            it += 1
            ll0 = ll
            st, ll, post = steps.step(st, post)
            _record(paths, act, ll)
            change = ll - ll0
        for a, b in zip(full, st):
            a[act] = b
        keep = retire_finished(ll, change, tol_n, act, status)
        if keep is not None:
            act, ll = act[keep], ll[keep]
            st, post = take_entries(st, keep), take_entries(post, keep)
            steps.compact(keep)
    return {"state": full, "status": status, "paths": paths, "steps": steps}
