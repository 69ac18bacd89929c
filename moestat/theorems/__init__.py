"""The theorem registry and what judges a truth against a theorem: hypotheses, judges, checks.

One home for theorems (:mod:`moestat.theorems.registry` and its data files): the hypothesis
instruments (:mod:`~moestat.theorems.hypotheses`), a scenario file's predictions
(:mod:`~moestat.theorems.file_theorems`), the catalogue runs' hypotheses
(:mod:`~moestat.theorems.catalogue_hypotheses`), the slow-rate judges (:mod:`moestat.theorems.judges`)
and the ``moestat theory`` checks (:mod:`moestat.theorems.checks`).  Nothing is imported here, so
that loading the registry loads nothing else.
"""
