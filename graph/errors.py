"""The root of the-loop's exception tree.

Every exception the project raises on purpose derives from :class:`LoopError`, so a
caller that wants "anything the-loop refused or failed at" catches one class. Each
package keeps its own errors below it, next to the code that raises them::

    LoopError
    ├── graph: GraphError, StateError, HookError ...
    ├── integrations: IntegrationError -> NotFound, RateLimited, Unavailable, Unsupported
    ├── configuration: ConfigFileError -> InvalidConfigError, LegacyConfigError; SettingsError
    ├── the delivery protocol: DeliveryError ...
    └── webhook: the receiver's refusals, each with its HTTP status

``graph/`` is the innermost package, so the root lives here and every other package may
import it without pointing outward.
"""

from __future__ import annotations


class LoopError(Exception):
    """Base class of every error the-loop raises on purpose (never raised itself)."""
