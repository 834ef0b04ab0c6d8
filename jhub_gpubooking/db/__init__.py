"""Persistence: SQLAlchemy models, the session factory, Alembic migrations and BookingStore."""
