"""Share groups' data side (KIP-932): the share partitions a partition leader keeps for each share
group that consumes it, the share sessions of ShareFetch and ShareAcknowledge, and the manager that
runs them on the broker's loop (Kafka's SharePartition, ShareSessionCache, SharePartitionManager)."""
