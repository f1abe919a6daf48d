"""Kept for imports of the old module path: the processor is :mod:`workers.drain`'s."""

from workers.drain import DeliveryProcessor, GitHubFactory, Handled

__all__ = ["DeliveryProcessor", "GitHubFactory", "Handled"]
