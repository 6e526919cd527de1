"""The one exception of the build: ``PreflightError``."""


class PreflightError(Exception):
    """A build cannot proceed; the message is one paragraph naming the value and the fix."""
