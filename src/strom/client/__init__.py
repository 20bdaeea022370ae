"""Blocking Kafka protocol connections for strom's own tools and the Spark source's executors: kio
requests over a socket, TLS and SASL login from client properties. Used by cli/ and spark/ (both
above it); it uses only protocol/ and security/."""
