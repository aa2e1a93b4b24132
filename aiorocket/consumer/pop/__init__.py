"""The gRPC message source of the consumer runtime: pop consumption through a 5.x Proxy.

The Proxy hands out messages, not queues: receivers long-poll it and hand what arrives
to the same delivery strategies the remoting engine feeds (worker pool, ``async for``,
orderly for FIFO groups), through the core's ``QueueView`` (``.queue``) and
``Settler`` (``.settler``). What exists for pop only lives here: the invisible
time (``.renewer``), acks in batches (``aiorocket.grpc._acks``), the server's
retry policy (``.settler``) and the runtime that ties them (``.runtime``).

Importing this package does not import the ``grpc`` extra; starting a consumer does.
"""
