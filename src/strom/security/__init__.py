"""Security: TLS listeners, SASL authentication, the principal a connection acts as, and ACLs.

Every connection carries a ``KafkaPrincipal`` (``KafkaConnection.principal``; its text is each
request's ``RequestContext.principal``), which the ACL authorizer (acl.py) decides on.
"""
