"""A loopback fake GitHub for the sandbox and the tests: its state (``state``) and its
HTTP front (``http``). Not part of the production transports."""
