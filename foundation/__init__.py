"""the-loop's foundation: settings and config, events and payload schemas, the Redis
client, the delivery and turn protocols, observability, signing and the hook plugins.

It imports the core (``graph``) and libraries only: no transport, process or application
package (``tests/test_layering.py``)."""
