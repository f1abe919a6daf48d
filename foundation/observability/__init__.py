"""Logging and metric labels shared by the receiver, the worker and the command line."""
