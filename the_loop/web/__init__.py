"""The read API (``/api/v1/``) and the dashboard (``/ui/``), served by the receiver's
Flask app beside ``POST /webhook`` (:func:`the_loop.wiring.build_receiver` registers
them; :mod:`the_loop.web.app`). Importing this package imports no web framework: the
worker uses :mod:`foundation.links` to link to a work item's page.
"""
