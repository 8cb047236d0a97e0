"""The proxy's rows on SQLite and PostgreSQL: a session keeps its name (and the canary's state)
across restarts, pairs are written in order, a dropped mirror has no candidate."""

from __future__ import annotations

from sqlalchemy import select, update

from servegate.store import tables
from servegate.store.proxy_records import ProxyRecorder, read_pairs
from servegate.store.writer import open_engine


def test_pairs_are_kept_in_order_and_a_restart_continues_the_session(store_url: str) -> None:
    engine = open_engine(store_url)
    try:
        urls = {"mode": "shadow", "primary_url": "http://a/v1"}
        first = ProxyRecorder.open(
            engine, "prod", **urls, candidate_url="http://b/v1", config={"sample": 0.05}
        )
        first.write_pair("/v1/chat/completions", {"body": {"messages": []}},
                         {"status": 200}, {"status": 500}, {"exact_match": None})  # fmt: skip
        first.write_pair("/v1/embeddings", {"body": {"input": "x"}}, {"status": 200}, None,
                         {"dropped": "mirror queue full"})  # fmt: skip
        with engine.begin() as conn:  # what the canary controller keeps in the session row
            conn.execute(update(tables.proxy_sessions).values(state_json='{"step": 2}'))
        again = ProxyRecorder.open(
            engine, "prod", **urls, candidate_url="http://c/v1", config={"sample": 0.1}
        )
        again.write_pair("/v1/completions", {"body": {"prompt": "p"}}, {"status": 200},
                         {"status": 200}, {"exact_match": True})  # fmt: skip
        pairs = read_pairs(engine, "prod")
        assert [(p.path, p.candidate, p.comparison) for p in pairs] == [
            ("/v1/chat/completions", {"status": 500}, {"exact_match": None}),
            ("/v1/embeddings", None, {"dropped": "mirror queue full"}),
            ("/v1/completions", {"status": 200}, {"exact_match": True}),
        ]
        with engine.connect() as conn:
            rows = conn.execute(select(tables.proxy_sessions)).mappings().all()
        assert len(rows) == 1
        assert (rows[0]["candidate_url"], rows[0]["state_json"]) == ("http://c/v1", '{"step": 2}')
        assert read_pairs(engine, "other") == []
    finally:
        engine.dispose()
