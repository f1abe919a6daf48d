"""The root of the-loop's exception tree.

Every exception the project raises on purpose derives from :class:`LoopError`, so a
caller that wants "anything the-loop refused or failed at" catches one class. Each
package keeps its own errors below it, next to the code that raises them. Where a class
also derives from a built-in (``ValueError``, ``RuntimeError``...) it keeps that base, so
older ``except`` clauses still hold. ``tests/test_exception_tree.py`` checks that every
exception class in the packages is in this tree, and drawn here::

    LoopError
    ├── graph
    │   ├── GraphError (ValueError)                compile.py: the graph file is invalid
    │   ├── AmbiguousEdgeWarning (UserWarning)     compile.py: a warning, not raised
    │   ├── RegistryError (ValueError)             registry.py
    │   ├── RefError (ValueError)                  refs.py: not a work-item ref
    │   ├── StateError (ValueError)                state.py: a stored state is unreadable
    │   ├── GraphMismatch (RuntimeError)           runtime/shapes.py
    │   ├── ForceError (ValueError)                runtime/shapes.py: `force`/`migrate` refused
    │   ├── TaskPlanError (ValueError)             tasks.py: a task list is not a valid plan
    │   ├── EnvelopeError (ValueError)             envelope.py: an envelope that does not hold
    │   │   └── EnvelopeLimitError                 past the the-loop.graph/v1 limits
    │   └── SigningKeyError (ValueError)           signing.py: not an Ed25519 key as expected
    ├── IntegrationError                           ports.py: an external system refused/failed
    │   ├── NotFound                               404, or not visible
    │   ├── RateLimited (retry_after, reset_at)    429 / 403 rate limit; retriable
    │   ├── Unavailable                            5xx, network, timeout; retriable
    │   ├── Unsupported                            the transport lacks the operation
    │   └── RetryLater                             the outbox's verdict: retry the delivery
    ├── integrations
    │   ├── CapabilityError (RuntimeError)         capabilities.py: a graph needs a missing op
    │   ├── GitHubConfigError (ValueError)         github.py
    │   ├── ProviderConfigError (ValueError)       providers.py
    │   ├── RedeliverError (RuntimeError)          hook_deliveries.py: GitHub refused (status)
    │   └── HarnessError                           harness/base.py: a harness unusable as set
    │       ├── HarnessMissing                     the executable is not installed
    │       └── HarnessVersionError                unpinned, or not the pinned version
    ├── webhook
    │   └── DeliveryError                          events.py: a refused delivery, with status
    │       ├── BadHeadersError, PayloadTooLargeError, SignatureError,
    │       │   QueueUnavailableError
    │       └── BadPayloadError -> UnsupportedContentTypeError
    ├── foundation
    │   ├── SettingsError (ValueError)             settings.py: a bad variable or key
    │   ├── ConfigFileError (ValueError)           config/loader.py: a configuration file
    │   │   ├── InvalidConfigError                 config/loader.py
    │   │   └── LegacyConfigError                  config/loader.py
    │   ├── DeliveryCommandError (RuntimeError)    inbox/dead.py: an operator command refused
    │   ├── NamespaceTaken                         redis/namespaces.py: a key namespace taken
    │   ├── NotReplicatedError (redis.RedisError)  inbox/enqueue.py: too few replicas had it
    │   └── ParserError (RuntimeError)             hooks/lint_artifacts.py: Mermaid parser failed
    ├── workers
    │   ├── NoProcessor (RuntimeError)             jobs.py: a job ran outside a worker
    │   ├── LockLost                               state.py: a write's work item lock was taken over
    │   └── WorkerLoopEnded (redis ConnectionError) worker.py
    ├── runner
    │   ├── WorkspaceError                         workspace.py: a git step of a checkout
    │   │   └── MergeConflict                      a task's branch conflicts with its item's
    │   ├── TurnAbandoned                          service.py: another attempt took the turn
    │   └── TurnInterrupted                        service.py: the stopping runner drained it
    └── the_loop
        ├── NoGitHubClient (SettingsError)         wiring.py
        ├── MissingTool (GraphError)               graphs.py: a hook's tool is not installed
        ├── UpgradeError (ConfigFileError)         upgrade.py
        ├── ManifestError (ValueError)             manifest.py
        ├── AppCreateError                         app_create.py: the manifest flow failed
        ├── QueryError (ValueError)                web/readmodel.py: a bad query parameter
        └── OAuthError (RuntimeError)              web/oauth.py: Sign in with GitHub failed

``graph/`` is the innermost package, so the root lives here and every other package may
import it without pointing outward.
"""

from __future__ import annotations


class LoopError(Exception):
    """Base class of every error the-loop raises on purpose (never raised itself)."""
