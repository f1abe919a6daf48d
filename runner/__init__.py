"""The agent runner: the process that takes turn jobs from RQ, checks out the work
item's branch and runs one harness session turn in it (``runner.service``)."""
