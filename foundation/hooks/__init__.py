"""The built-in hooks, one module each, registered into :data:`REGISTRY` by the explicit
import list below (the graph core never imports them; it is handed the registry).

A new behaviour is a new module here, added to this list.
"""

from foundation.hooks import (  # noqa: F401  (imported for registration)
    classify_feedback,
    is_docs_only,
    lint_artifacts,
    log_entry,
    mark_ready,
    mcp_call,
    merge_pull_request,
    notify,
    publish_check,
    record_decision,
    record_feedback,
    request_review,
    set_phase_label,
    validate_artifacts,
    verify_tests,
)
from graph.registry import DEFAULT_REGISTRY

#: The registry holding every built-in hook.
REGISTRY = DEFAULT_REGISTRY

__all__ = ["REGISTRY"]
