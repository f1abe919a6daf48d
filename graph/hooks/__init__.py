"""Built-in hooks, registered into :data:`graph.registry.DEFAULT_REGISTRY`.

A new behaviour is a new module here, added to the explicit import list below.
"""

from graph.hooks import (  # noqa: F401  (imported for registration)
    classify_feedback,
    is_docs_only,
    lint_artifacts,
    log_entry,
    notify,
    publish_check,
    record_decision,
    record_feedback,
    request_review,
    set_phase_label,
    validate_artifacts,
    verify_tests,
)
