"""Kafka error codes, re-exported from kio so the rest of strom has one place to import them."""

from kio.schema.errors import ErrorCode

__all__ = ["ErrorCode"]
