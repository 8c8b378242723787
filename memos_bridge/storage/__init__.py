"""Persistence: schema, migrations, full-text and vector search, and the async database facade.

Modules, one job each:

* `models`     – SQLAlchemy ORM tables for the whole product;
* `owner`      – namespace visibility (`OwnerFilter`, `OwnerKey`);
* `engine`     – engine creation, SQLite pragmas and transaction control;
* `migrations` – versioned in-place schema upgrades;
* `fts`        – full-text search (SQLite FTS5 trigram + word indexes) and safe query helpers;
* `pg_search`  – the same on PostgreSQL: weighted tsvector and 3-gram columns with GIN indexes;
* `vectors`    – in-memory numpy cosine index over float32 BLOB vectors;
* `pg_vectors` – vectors searched by PostgreSQL with pgvector (HNSW), derived from the BLOBs by triggers;
* `database`   – `Database`: serialised writes and concurrent reads from async code.

Nothing is imported here, so importing one module does not pull in numpy or the ORM needlessly.
"""
