"""PeerMetadata: whether every live broker's Metadata answer shows a leader for every partition
of a topic, asked of each of them (this one too) over the inter-broker listener (a Metadata request,
as any client would send). CreateTopics answers once they do: a client that asks any broker right
after the answer finds every leader, and the leader serves it (a broker names itself leader only once
it has taken the partition up; docs/cluster.md). Each broker learns the leaders from ZooKeeper on its
own, so the broker that took the request cannot know otherwise when the others have them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from kio.schema.metadata.v9 import request as md_req
from kio.schema.types import TopicName

from strom.cluster.client import BrokerConnection
from strom.protocol.errors import ErrorCode as E

if TYPE_CHECKING:
    from strom.cluster.zk_layout import BrokerRegistration
    from strom.security.client import ClientSecurity

log = logging.getLogger("strom.cluster")

METADATA_VERSION = 9
_POLL_S = 0.02


class PeerMetadata:
    def __init__(self, broker_id: int, brokers: Callable[[], Mapping[int, BrokerRegistration]],
                 listener: Callable[[], str], security: Callable[[], ClientSecurity]) -> None:
        """``brokers`` are the live registrations; ``listener`` the inter-broker listener's name;
        ``security`` how to connect to it."""
        self.broker_id = broker_id
        self._brokers = brokers
        self._listener = listener
        self._security = security

    async def wait_for_leaders(self, topic: str, partitions: range, timeout_s: float) -> list[int]:
        """Until every live broker's Metadata shows a leader for each of ``partitions`` of
        ``topic``, or ``timeout_s`` is up; the brokers that did not (a broker that cannot be reached,
        stopping say, is not waited for)."""
        # This broker too: a broker named leader answers so only once it serves the partition.
        others = dict(self._brokers())
        results = await asyncio.gather(*(self._wait_one(b, reg, topic, partitions, timeout_s)
                                         for b, reg in others.items()))
        return [b for b, ok in zip(others, results, strict=True) if not ok]

    async def _wait_one(self, broker_id: int, reg: BrokerRegistration, topic: str, partitions: range,
                        timeout_s: float) -> bool:
        host, port = reg.address_for(self._listener())
        conn = BrokerConnection(host, port, f"strom-broker-{self.broker_id}-metadata", timeout_s, self._security())
        body = md_req.MetadataRequest(topics=(md_req.MetadataRequestTopic(name=TopicName(topic)),),
                                      allow_auto_topic_creation=False,
                                      include_cluster_authorized_operations=False,
                                      include_topic_authorized_operations=False)
        wanted = set(partitions)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        try:
            async with asyncio.timeout(timeout_s):
                while True:
                    response = await conn.request(3, METADATA_VERSION, body)
                    if any(t.error_code == E.topic_authorization_failed for t in response.topics):
                        return True  # it will not tell this broker's principal: nothing to wait for
                    led = {p.partition_index for t in response.topics if t.name == topic and t.error_code == 0
                           for p in t.partitions if p.leader_id >= 0}
                    if wanted <= led:
                        return True
                    if loop.time() + _POLL_S >= deadline:
                        return False
                    await asyncio.sleep(_POLL_S)
        except (OSError, EOFError, asyncio.IncompleteReadError, ConnectionError) as e:
            log.debug("asking broker %d for the leaders of %s: %s", broker_id, topic, e)
            return True  # not reachable: nothing a client could ask it either
        except TimeoutError:
            return False
        finally:
            conn.close()
