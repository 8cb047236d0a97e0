"""Canary judgement: which share of live traffic the candidate gets, and when to roll back."""
