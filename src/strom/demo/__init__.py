"""Runnable demonstrations of strom (`strom demo ...`)."""
