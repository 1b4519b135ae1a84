"""Synchronization protocols: BSP runs through the communicator's collectives; ASP and SSP
through an append-only log of updates on the channel (``lambdaml.sync.asp``)."""
