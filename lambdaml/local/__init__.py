"""The local stack: services on loopback that stand in for AWS."""
