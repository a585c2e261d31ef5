"""The vault on PostgreSQL (`[vault] url`): connections that run the stores' synchronous bodies
(`connection.py`), the SQL translation (`dialect.py`), the schema and migrations (`schema.py`,
`migrate.py`), the `PgVault` itself (`vault.py`), the SQLite -> PostgreSQL copy (`copy.py`)
and the replicas' leader locks on connections of their own (`leader.py`).
Imported only when a URL is configured: psycopg is the optional `postgres` extra.
"""
