"""Moved to strom.client.raw_connection (the Spark source uses it too); kept so old imports work."""

from strom.client.raw_connection import RawConnection

__all__ = ["RawConnection"]
