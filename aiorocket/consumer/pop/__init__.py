"""The pop message source of the consumer runtime: through a 5.x Proxy (gRPC) or from
the brokers over remoting (``Consumer(..., consume_mode="pop")``).

The server hands out messages, not queues: receivers long-poll it and hand what arrives
to the same delivery strategies the remoting engine feeds (worker pool, ``async for``,
orderly), through the core's ``QueueView`` (``.queue``) and ``Settler`` (``.settler``).
What exists for pop only lives here: the transport seam (``.source``: ``PopSource``,
implemented by ``.grpc_source`` and ``.remoting_source``), the invisible time
(``.renewer``), acks in batches (``.acks``), retries and the dead-letter queue
(``.settler``) and the runtime that ties them (``.runtime``).

Importing this package does not import the ``grpc`` extra; starting a gRPC consumer does.
"""
