"""Orchestration: config → endpoints → gates → verdict → store/reports.

`gate_sequence` (the gates in the order they run), `runner` (one run: preflight, launch, gates,
verdict, store), `matrix` (a run per execution path), `ray_matrix` (its entries as Ray tasks),
`shared_baseline` and `ray_baseline` (its baseline launched once per node).
"""
