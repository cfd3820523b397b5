"""The search package's errors: each message names the input at fault and the fix."""

from __future__ import annotations

__all__ = ["SearchError", "SearchInterrupted", "SpaceError", "StorageError", "TargetError"]


class SearchError(ValueError):
    """A search that cannot run as asked."""


class SpaceError(SearchError):
    """A search space that cannot be used; the message names the file and the key."""


class TargetError(SearchError):
    """A target or objective that cannot be used."""


class StorageError(SearchError):
    """A storage URL that cannot be used, or a study that is not there (or already is)."""


class SearchInterrupted(SearchError):
    """The user stopped a search (Ctrl-C); the message says how to continue it."""
