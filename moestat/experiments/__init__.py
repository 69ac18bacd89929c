"""Experiments built on the library: the thesis's toy tasks, Soft MoE, real data (the theory checks are moestat.theorems.checks)."""
