"""Errors raised for user mistakes. Each message names the problem and the fix."""

from __future__ import annotations


class FormersError(Exception):
    """Base class of every error formers raises on purpose."""


class ConfigError(FormersError, ValueError):
    """A configuration value is invalid or unknown."""


class InputError(FormersError, ValueError):
    """A model input (tokens, masks, memory) does not fit the model."""
