"""The package's version: one source for ``aiorocket.__version__``, the build metadata
(pyproject's dynamic version) and what clients report to servers.

A module of its own, at the bottom of the layers, so that code reporting the version
(the consumer's running info, the gRPC transport's headers, the CLI, telemetry) need not
import the top-level package, which re-exports the clients.
"""

__version__ = "0.1.0.dev0"
