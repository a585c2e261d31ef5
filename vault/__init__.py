"""The SQLite vault: one connection, serialized transactions, one store module per aggregate."""
