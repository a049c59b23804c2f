"""An embedded PostgreSQL server, for laptops, tests and drills, started only by choice."""

from supervisor.embedded.server import EmbeddedPostgres, EmbeddedUnavailable, available

__all__ = ["EmbeddedPostgres", "EmbeddedUnavailable", "available"]
