"""The broker's admin HTTP side: Prometheus metrics, health checks, a REST API and the web console.

Sits above ``broker/`` (the broker never imports it): ``strom.admin.server.attach(broker)`` registers
the server as one of the broker's services, which the broker starts and stops with itself.
"""
