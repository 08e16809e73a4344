"""The one error type for user mistakes: caught at the entry point, printed as one line."""


class ConfigError(ValueError):
    """A bad key or value in the config or on the command line."""
