"""Alembic migrations of the store, shipped in the package: `env.py` and `versions/`.

servegate applies them itself when it opens a database (`servegate.store.schema`); no
alembic.ini is needed. To add a revision: write `versions/NNNN_name.py` by hand with
`down_revision` set to the current head, and change `store/tables.py` to match — the tests
compare a database migrated from empty with `tables.metadata`.
"""
