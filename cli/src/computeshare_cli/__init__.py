"""ComputeShare from a terminal: a client of the public REST API (/api/v1/) only."""

__version__ = "0.1.0"
