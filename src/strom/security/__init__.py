"""Security: TLS listeners, SASL authentication and the principal a connection acts as.

Authorization (ACLs) and quotas will plug in above this: every connection carries a
``KafkaPrincipal`` (``KafkaConnection.principal`` and ``RequestContext.principal``) for them to check.
"""
