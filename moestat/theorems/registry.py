"""The theorem registry: one type per thing a theorem declares, loaded from one data file per entry.

Every theorem moestat knows and every catalogue entry that runs one is declared in a TOML file of
``moestat/theorems/data/`` (read with :mod:`tomllib`), and nowhere else.  A file declares

- a catalogue **entry** (:class:`Entry`): the paper (:class:`Paper`, or its arXiv id when another
  file declares it), its runs (:class:`Run`, each naming the theorem whose hypotheses its truth
  must meet), its predictions (:class:`Prediction`) and how they are judged;
- the **theorems** its runs are held to (:class:`Theorem`): the citation, the fits it speaks of
  (``setting``), its model class and the hypothesis conditions it requires
  (:mod:`moestat.theorems.hypotheses` computes them), and where a scenario file's row takes its
  headline prediction from (:mod:`moestat.theorems.file_theorems`).

The files are read in the order of their names (``NN-key.toml``), which is the catalogue's order
and the order theorems are listed in; a file without ``key`` declares theorems only (the classical
theorem, ``99-classical-mle.toml``).  A new entry is one new file (docs/guide/catalogue.rst, "Adding
a theorem"); a module is needed only for an instrument that judges it (``judge``,
:mod:`moestat.theorems.judges`).

This module imports nothing of the rates engine: what reads a theorem (the hypotheses, a scenario
file's predictions) does not load the machinery that runs it.
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

# Theorem 2's per-block exponents of an over-fitted cell (Nguyen, Nguyen & Ho 2023): a ``blocks`` key
from moestat.data.gaussian_scenarios import BLOCKS, block_predictions

__all__ = ["REPORT_SCHEMA", "STATISTIC", "SLOWER", "STANDINGS", "THEOREM_STANDING", "UNREAD_STANDING", "MODEL_CLASS_KEYS",
           "FILE_TABLES", "Paper", "Prediction", "Run", "Entry", "Theorem", "ENTRIES", "THEOREMS", "CATALOGUE_THEOREMS",
           "entry", "theorem", "headline_prediction", "catalogue_file", "data_files", "load"]

#: Written into ``OUT/catalogue.json``.
REPORT_SCHEMA = "moestat.catalogue.report/1"
#: What the catalogue's rates are fitted to per ``n``: the theorems' polynomial rates are ``O_P``
#: statements, bounds on the loss's quantiles, so every run, re-judgement and contrast of the
#: catalogue uses the per-``n`` median; the mean's slope and category are reported beside each row.
STATISTIC = "median"
SLOWER = "slower than any polynomial rate"
#: Where each prediction comes from (:attr:`Prediction.standing`), strongest first:
#:
#: - ``full text``: the theorem read in the paper's full text;
#: - ``abstract``: only the abstract was read (or a summary page, a repository's README or a page
#:   quoting the paper: the paper's own words, second-hand or in summary, not its theorem);
#: - ``digest``: a digest of a seed text whose mathematics was stripped in extraction (the
#:   cosine-router theorems of Nguyen et al. 2024, read in a reconstructed digest);
#: - ``figure slope``: a slope read from a figure, not a theorem's exponent;
#: - ``own derivation``: moestat's own derivation -- the classical parametric ``n^-1/2`` of a regular
#:   fit, or an exponent borrowed from another theorem (the prediction's ``source`` says which);
#: - ``not read``: the paper's statement was not read, so there is no exponent: the loss is reported.
#:
#: Only a ``consistent`` row of standing ``full text`` counts as a theorem reproduction
#: (:func:`standing_counts`); the others are qualitative claims or of lower standing.
STANDINGS = ("full text", "abstract", "digest", "figure slope", "own derivation", "not read")
#: The standing of a theorem read in full, the only one whose consistent rows reproduce a theorem.
THEOREM_STANDING = "full text"
#: The standing of a prediction whose exponent could not be read.
UNREAD_STANDING = "not read"


@dataclass(frozen=True)
class Paper:
    """A paper: ``authors`` as the docs name it ("Nguyen, Ho & Rinaldo"), year, title, venue,
    arXiv id, and where moestat read it (the address of the stored copy)."""

    authors: str
    year: int
    title: str
    venue: str
    arxiv: str
    read_at: str

    @property
    def cite(self) -> str:
        return f"{self.authors} ({self.year})"


@dataclass(frozen=True)
class Prediction:
    """The prediction for one loss of one run: ``exponent`` of ``n`` or ``None`` (:data:`SLOWER`)."""

    run: str
    loss: str
    exponent: float | None
    source: str
    #: the prediction in words when it is not an exponent nor "slower than any polynomial rate"
    claim: str = ""
    #: judged by the entry's contrast (:attr:`Entry.contrast`) rather than by an interval
    by_contrast: bool = False
    #: how the exponent is tested (:func:`moestat.rates.verdicts.judge_interval`): ``"two"`` for a rate
    #: the estimator attains (the parametric ``n^-1/2``), ``"upper"`` for a worst-case upper bound, which a
    #: faster loss does not contradict; the same as the rates pipeline's
    #: (:func:`moestat.rates.fit.predicted_sided`, a test checks they agree)
    sided: str = "two"
    #: why ``sided`` (required for ``"upper"``)
    sided_reason: str = "a rate the estimator attains: tested two-sided"
    #: where the prediction comes from, one of :data:`STANDINGS` (required)
    standing: str = ""

    def __post_init__(self) -> None:
        if self.sided not in ("two", "upper"):
            raise ValueError(f"Prediction.sided must be 'two' or 'upper', got {self.sided!r}")
        if self.standing not in STANDINGS:
            raise ValueError(f"Prediction.standing must be one of {', '.join(STANDINGS)}, got {self.standing!r}")

    @property
    def text(self) -> str:
        if self.claim:
            return self.claim
        if self.exponent is None:
            return SLOWER
        return f"n^{self.exponent:g}" + (" (upper bound)" if self.sided == "upper" else "")


@dataclass(frozen=True)
class Run:
    """One rates run of an entry.

    Parameters
    ----------
    label : str
        Sub-folder of ``--out`` and the name in the report.
    base : dict
        Flat :class:`~moestat.rates.config.RatesConfig` keys of the model and estimator; a key
        ``catalogue_file`` names a scenario file of ``moestat/rates/catalogue_files/`` (resolved to
        its installed path as ``scenario_file``).
    full, quick : dict
        The grid keys (``n_min n_max n_points reps`` ...) of the full and the ``--quick`` run.
    requires : str
        What the run needs that moestat may lack (shown as ``needs: ...`` when the configuration
        cannot be built); empty when nothing beyond the rates pipeline.
    """

    label: str
    base: Mapping[str, Any]
    full: Mapping[str, Any]
    quick: Mapping[str, Any]
    requires: str = ""


@dataclass(frozen=True)
class Entry:
    """One published theorem with its simulation study (see the module docstring)."""

    key: str
    paper: Paper
    theorem: str
    figure: str
    model: str
    estimator: str
    paper_design: str
    runs: tuple[Run, ...]
    predictions: tuple[Prediction, ...]
    #: (slow run, fast run, loss): the "slower than any polynomial" run judged against the fast one
    contrast: tuple[str, str, str] | None = None
    #: a limitation known without building anything (e.g. a parameter moestat cannot fit)
    blocked: str = ""
    notes: str = ""
    recorded: str = ""
    #: ``"module:function"`` judging the predictions by an instrument other than the fitted slopes (a
    #: two-point bound, for statements about every estimator); ``function(quick) -> {run label:
    #: {"category", "reason", "loss", ...}}``, whose category and reason replace the slope's or the
    #: contrast's for the one prediction of that run and loss (kept in the row as ``fixed_truth``)
    judge: str = ""
    #: run label -> why the run is not tested: it is not fitted by :func:`reproduce` and never judged; its
    #: rows (and a contrast naming it) are categorised ``untested`` with this reason and the run's
    #: pre-flight (``n_ok``, smallest Fisher eigenvalue), computed when the report is written
    untested: Mapping[str, str] = dataclasses.field(default_factory=dict)


#: The attributes of a truth's model (:func:`moestat.theorems.hypotheses.check_hypotheses` reads them off
#: the scenario) that a theorem's ``model_class`` may name.
MODEL_CLASS_KEYS = ("score_kind", "normalisation", "likelihood", "k_active", "expert_kind", "setting")
#: How a scenario file's losses get a met theorem's exponents (:mod:`moestat.theorems.file_theorems`):
#: ``perturbed-router`` the perturbed router's table (Nguyen et al. 2024, Theorems 5 and 6), ``gmoe`` the
#: softmax-gated Gaussian MoE's (Nguyen, Nguyen & Ho 2023, Theorems 1 and 2), ``slow`` "slower than any
#: polynomial rate" on the Voronoi loss and the parameter errors, ``classical`` ``n^-1/2`` everywhere; empty:
#: the theorem is reported as met with no exponent attached.
FILE_TABLES = ("", "perturbed-router", "gmoe", "slow", "classical")


@dataclass(frozen=True)
class Theorem:
    """A theorem: its citation, the fits and model class it speaks of, and the conditions it requires.

    ``model_class`` maps an attribute of the truth's model (one of :data:`MODEL_CLASS_KEYS`) to what
    the theorem needs: a string (equal), a list (one of), ``False`` (absent: ``None``) or ``True``
    (present); :meth:`applies` reads it.  ``requires`` maps a condition of
    :func:`moestat.theorems.hypotheses.conditions` to whether it must hold (``True``) or fail
    (``False``).  ``read`` says where the statement was read (a digest, or only an abstract);
    ``setting`` the fits it speaks of: ``"exact"`` (``k = k*``), ``"over"`` (``k > k*``) or
    ``"any"``.  ``headline`` names the catalogue prediction a scenario file's row takes its standing
    from (``exact``/``over``: the entry for that setting, ``loss``, and ``run`` where the entry has
    a fast and a slow arm); ``file_table`` one of :data:`FILE_TABLES`; ``entry`` the file's entry
    (empty for a theorem no entry runs).
    """

    key: str
    cite: str
    claim: str
    model_class: Mapping[str, Any]
    requires: Mapping[str, bool]
    read: str
    setting: str = "any"
    file_table: str = ""
    headline: Mapping[str, str] = dataclasses.field(default_factory=dict)
    entry: str = ""

    def __post_init__(self) -> None:
        if self.setting not in ("any", "exact", "over"):
            raise ValueError(f"theorem {self.key}: setting must be any, exact or over, got {self.setting!r}")
        if self.file_table not in FILE_TABLES:
            raise ValueError(f"theorem {self.key}: file_table must be one of {', '.join(FILE_TABLES[1:])}, "
                             f"got {self.file_table!r}")
        bad = sorted(set(self.model_class) - set(MODEL_CLASS_KEYS))
        if bad:
            raise ValueError(f"theorem {self.key}: model_class keys {', '.join(bad)} unknown; expected "
                             f"{', '.join(MODEL_CLASS_KEYS)}")

    def applies(self, parts: Any) -> bool:
        """Whether a truth's model (an object with the attributes of :data:`MODEL_CLASS_KEYS`) is of the
        theorem's class."""
        for name, want in self.model_class.items():
            have = getattr(parts, name)
            if want is True or want is False:
                if (have is not None) != want:
                    return False
            elif isinstance(want, list):
                if have not in want:
                    return False
            elif have != want:
                return False
        return True


# ---------------------------------------------------------------------------------------------
# the loader
# ---------------------------------------------------------------------------------------------
_ENTRY_KEYS = {f.name for f in dataclasses.fields(Entry)} | {"runs", "predictions", "theorems"}
_RUN_KEYS = {f.name for f in dataclasses.fields(Run)} | {"theorem", "theorems"}
_PREDICTION_KEYS = {f.name for f in dataclasses.fields(Prediction)} | {"blocks"}
_THEOREM_KEYS = {f.name for f in dataclasses.fields(Theorem)} - {"entry"}


def data_files() -> list[Path]:
    """The registry's data files, in the order they are read (their names')."""
    folder = resources.files("moestat.theorems") / "data"
    return sorted((Path(str(p)) for p in folder.iterdir() if p.name.endswith(".toml")), key=lambda p: p.name)


def _check_keys(where: str, table: Mapping[str, Any], allowed: set[str]) -> None:
    bad = sorted(set(table) - allowed)
    if bad:
        raise ValueError(f"{where}: unknown keys {', '.join(bad)}; expected some of {', '.join(sorted(allowed))}")


def _predictions(where: str, p: Mapping[str, Any]) -> list[Prediction]:
    """The predictions of one ``[[predictions]]`` table: one, or one per Gaussian-MoE block for ``blocks = M``
    (Theorem 2 of Nguyen, Nguyen & Ho 2023: beta1 and b at ``n^-1/(2 rbar(M))``, a and the variance at
    ``n^-1/rbar(M)``; ``source`` a template of ``{block}`` and ``{rate}``)."""
    _check_keys(where, p, _PREDICTION_KEYS)
    p = dict(p)
    cells = p.pop("blocks", None)
    if cells is None:
        p.setdefault("exponent", None)  # TOML has no null: an absent exponent is "no exponent" (SLOWER or a claim)
        return [Prediction(**p)]
    template = p.pop("source")
    return [Prediction(loss=col, exponent=x, source=template.format(
                block=BLOCKS[col][0], rate="-1/(2 rbar)" if BLOCKS[col][1] == "rbar" else "-1/rbar"), **p)
            for col, x in block_predictions(int(cells)).items()]


def load(files: list[Path] | None = None) -> tuple[dict[str, Entry], tuple[Theorem, ...],
                                                   dict[tuple[str, str, str | None], str]]:
    """Read the data files (default :func:`data_files`) into the entries, the theorems and the run -> theorem map.

    Returns
    -------
    entries : dict
        Entry key -> :class:`Entry`, in the files' order.
    theorems : tuple of Theorem
        In the files' order (each file's in its order).
    catalogue_theorems : dict
        ``(entry, run label, router or None)`` -> the key of the theorem whose hypotheses the run's
        truth must meet (a run's ``theorem``, or per router its ``theorems`` table).

    Raises
    ------
    ValueError
        One line naming the file: an unknown key, a duplicate entry or theorem, a paper cited by arXiv
        id that no file declares, a run naming a theorem no file declares.
    """
    entries: dict[str, Entry] = {}
    theorems: dict[str, Theorem] = {}
    runs_theorems: dict[tuple[str, str, str | None], str] = {}
    papers: dict[str, Paper] = {}
    for path in files if files is not None else data_files():
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
        where = path.name
        _check_keys(where, data, _ENTRY_KEYS)
        key = data.get("key", "")
        for t in data.get("theorems", []):
            _check_keys(f"{where}: theorem {t.get('key', '?')}", t, _THEOREM_KEYS)
            if t["key"] in theorems:
                raise ValueError(f"{where}: theorem {t['key']} is declared twice")
            theorems[t["key"]] = Theorem(**t, entry=key)
        if not key:
            continue
        if key in entries:
            raise ValueError(f"{where}: entry {key} is declared twice")
        paper = data["paper"]
        if isinstance(paper, str):
            if paper not in papers:
                raise ValueError(f"{where}: paper {paper} is not declared by an earlier file (give its [paper] table)")
            paper = papers[paper]
        else:
            paper = Paper(**paper)
            papers[paper.arxiv] = paper
        runs = []
        for r in data["runs"]:
            _check_keys(f"{where}: run {r.get('label', '?')}", r, _RUN_KEYS)
            r = dict(r)
            named = {None: r.pop("theorem")} if "theorem" in r else r.pop("theorems", {})
            for router, th in named.items():
                runs_theorems[(key, r["label"], router)] = th
            runs.append(Run(**r))
        predictions = [q for i, p in enumerate(data.get("predictions", []))
                       for q in _predictions(f"{where}: prediction {i + 1}", p)]
        fields = {k: v for k, v in data.items() if k not in ("runs", "predictions", "theorems", "paper")}
        if "contrast" in fields:
            fields["contrast"] = tuple(fields["contrast"])
        entries[key] = Entry(paper=paper, runs=tuple(runs), predictions=tuple(predictions), **fields)
    for (key, label, _), th in runs_theorems.items():
        if th not in theorems:
            raise ValueError(f"entry {key}, run {label}: theorem {th} is declared by no data file")
    for t in theorems.values():
        for setting in ("exact", "over"):
            if t.headline.get(setting) and t.headline[setting] not in entries:
                raise ValueError(f"theorem {t.key}: headline entry {t.headline[setting]} is declared by no data file")
    return entries, tuple(theorems.values()), runs_theorems


# ENTRIES: entry key -> Entry, in the data files' order; THEOREMS: in the files' order (the classical
# theorem last); CATALOGUE_THEOREMS: (entry, run label, router or None) -> the theorem whose hypotheses
# the run's truth must meet.  Loaded once, at import: every reader sees the same registry.
ENTRIES, THEOREMS, CATALOGUE_THEOREMS = load()
_BY_KEY = {t.key: t for t in THEOREMS}


def entry(key: str) -> Entry:
    """The entry ``key``; a one-line ``ValueError`` listing the keys otherwise."""
    if key not in ENTRIES:
        raise ValueError(f"unknown catalogue entry {key!r}; expected one of {', '.join(ENTRIES)}")
    return ENTRIES[key]


def theorem(key: str) -> Theorem:
    """The theorem ``key``; a one-line ``ValueError`` listing the keys otherwise."""
    if key not in _BY_KEY:
        raise ValueError(f"unknown theorem {key!r}; expected one of {', '.join(_BY_KEY)}")
    return _BY_KEY[key]


def headline_prediction(key: str, setting: str) -> Prediction:
    """The catalogue's :class:`Prediction` of theorem ``key``'s headline loss for fits of ``setting``
    (:attr:`Theorem.headline`): where a scenario file's row takes its standing and words from."""
    h = theorem(key).headline
    e = ENTRIES[h[setting]]
    return next(p for p in e.predictions if p.loss == h["loss"] and ("run" not in h or p.run == h["run"]))


def catalogue_file(name: str) -> Path:
    """The installed path of a scenario file shipped in ``moestat/rates/catalogue_files/``."""
    return Path(str(resources.files("moestat") / "rates" / "catalogue_files" / name))
