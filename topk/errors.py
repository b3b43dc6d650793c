"""Errors that stop a run with one sentence saying what is wrong and what to do."""


class TopkError(Exception):
    """Base class of the framework's own errors: the message is meant for the user as is."""


class ConfigError(TopkError, ValueError):
    """A configuration value is invalid; raised before any training starts."""


class RunRefused(ConfigError):
    """A run directory refused the run (it holds another run, or one to resume with another
    configuration); nothing in it was changed."""


class NonFiniteLossError(TopkError, FloatingPointError):
    """The training loss became NaN or infinite."""


class CheckpointError(TopkError):
    """A checkpoint cannot be read or does not match the run."""


class DataError(TopkError):
    """A data file cannot be read while training; the message names the file."""
