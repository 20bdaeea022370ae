"""A Confluent-compatible schema registry served by the broker (docs/schema-registry.md).

Its state lives in the compacted ``_schemas`` topic in Confluent's record format; every write goes
through that topic before it is answered. It knows nothing of the broker's handlers: it is given a
``SchemaLog`` (store.py) to append to and read from, and HTTP middlewares for hosts and logins.
In a cluster the broker leading ``_schemas`` writes; the others forward writes to its registry
(forward.py).
"""
