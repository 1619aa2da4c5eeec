"""The one exception the data layer raises for problems a user can fix."""

from __future__ import annotations

from formers.errors import FormersError


class DataError(FormersError):
    """A corpus is missing, corrupt, empty or undecodable; the message names file and fix."""
