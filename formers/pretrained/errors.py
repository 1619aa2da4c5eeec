"""The one error a pretrained checkpoint that cannot be read or honoured raises."""

from __future__ import annotations

from formers.errors import FormersError


class PretrainedError(FormersError):
    """A model folder or hub id that cannot be imported; the message names the problem and
    what to give instead."""
