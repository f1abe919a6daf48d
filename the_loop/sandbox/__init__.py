"""The embedded sandbox: a local stand-in for GitHub (the one fake GitHub, extended to send
signed webhook deliveries), the demo agent, and the ``the-loop sandbox`` commands."""
