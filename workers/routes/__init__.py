"""One handler per route (the plugin shape of Prow's hook server), one module per route
family.

:func:`workers.router.route` names what a delivery is for from ``(event, action)``;
:data:`HANDLERS` maps that route to the one function that handles it. Every handler has
the same shape, ``handler(agent, delivery) -> Handled``: :class:`Agent` carries what
handlers may use (state, runtime, repository context, notices, the GitHub provider),
:class:`Delivery` the delivery, read once (:class:`foundation.events.GitHubEvent`)
(:mod:`workers.routes.agent`, with :func:`admit`, which runs before any handler).

======================  ================================================================
route                   handler
======================  ================================================================
``drive``               :func:`drive`: enrol (the enrolment label) or advance
                        (:mod:`workers.routes.drive`)
``drive-if-enrolled``   :func:`drive_if_enrolled`: record the CI result, advance a work
                        item that has state (:mod:`workers.routes.ci`)
``ci``                  :func:`ci_status`: record a commit status; fan it out to the work
                        items whose head it names (or advance the one it was fanned to)
                        (:mod:`workers.routes.ci`)
``config``              :func:`config_push`: a push to the default branch refreshes the
                        repository configuration (:mod:`workers.routes.labels`)
``labels``              :func:`labels`: a person changed a ``phase:`` label (drift)
                        (:mod:`workers.routes.labels`)
``withdraw``            :func:`withdraw`: a comment deleted or a review dismissed
                        (:mod:`workers.routes.withdraw`)
``turn``                :func:`turn`: the runner's report of an agent turn: remember
                        the work item's branch and draft pull request, run the exit chain
                        (:mod:`workers.routes.turn`)
``installation``        :func:`installation`: the App's access changed; a work item
                        re-driven after ``unsuspend`` (:mod:`workers.routes.installation`)
``closed``              :func:`closed`: a work item's pull request closed: merged, it
                        advances and is completed (:mod:`workers.routes.finish`);
                        unmerged, it is abandoned (:mod:`workers.routes.closed`)
======================  ================================================================

A delivery about a work item's draft pull request (the one its agent turns push to) is
the work item's: it is forwarded to the work item's inbox, in order with its others.

Handlers raise whatever processing raises; the drain retries or parks the delivery
(:mod:`workers.drain`).
"""

from __future__ import annotations

from collections.abc import Mapping

from workers.router import (
    CI_ONLY,
    CLOSED,
    CONFIG,
    DRIVE,
    DRIVE_IF_ENROLLED,
    INSTALLATION,
    LABELS,
    TURN,
    WITHDRAW,
)
from workers.routes.agent import Agent, Delivery, GitHubFactory, Handled, Handler, admit
from workers.routes.ci import ci_status, drive_if_enrolled
from workers.routes.closed import closed
from workers.routes.drive import drive
from workers.routes.installation import installation
from workers.routes.labels import config_push, labels
from workers.routes.turn import turn
from workers.routes.withdraw import withdraw

__all__ = ["HANDLERS", "Agent", "Delivery", "GitHubFactory", "Handled", "Handler", "admit",
           "ci_status", "closed", "config_push", "drive", "drive_if_enrolled", "installation",
           "labels", "turn", "withdraw"]

#: route (:mod:`workers.router`) -> its handler.
HANDLERS: Mapping[str, Handler] = {
    DRIVE: drive,
    DRIVE_IF_ENROLLED: drive_if_enrolled,
    CI_ONLY: ci_status,
    CONFIG: config_push,
    LABELS: labels,
    WITHDRAW: withdraw,
    TURN: turn,
    INSTALLATION: installation,
    CLOSED: closed,
}
