"""``python -m strom``: the strom command (strom.testing starts brokers this way)."""

from strom.cli.main import main

main()
