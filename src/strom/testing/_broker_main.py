"""What EmbeddedBroker runs in its child: the strom command, as ``python -m strom`` runs it.

One difference: hypothesis is made unimportable first. kio registers hypothesis strategies for its
types whenever it can import hypothesis, which test environments usually can; that costs a broker
about 0.4 s at start and serves nothing in it.
"""

import sys

sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]

from strom.cli.main import main  # noqa: E402

main()
