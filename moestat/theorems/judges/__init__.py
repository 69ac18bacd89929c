"""The slow-rate judges: Le Cam two-point bounds for statements about every estimator.

A catalogue entry whose prediction is "slower than any polynomial rate" names one of these in its
data file (``judge = "moestat.theorems.judges.MODULE:FUNCTION"``); :func:`moestat.rates.catalogue.reproduce`
calls it.  Nothing is imported here.
"""
