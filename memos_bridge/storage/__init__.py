"""Persistence: schema, migrations, full-text and vector search, and the async database facade.

Modules, one job each:

* `models`     – SQLAlchemy ORM tables for the whole product;
* `owner`      – namespace visibility (`OwnerFilter`, `OwnerKey`);
* `engine`     – engine creation, SQLite pragmas and transaction control;
* `migrations` – versioned in-place schema upgrades;
* `fts`        – FTS5 trigram + word indexes and safe query helpers;
* `vectors`    – in-memory numpy cosine index over float32 BLOB vectors;
* `database`   – `Database`: serialised writes and concurrent reads from async code.

Nothing is imported here, so importing one module does not pull in numpy or the ORM needlessly.
"""
