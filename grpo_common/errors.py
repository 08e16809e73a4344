"""The one error type for user mistakes: caught at the entry point, printed as one line."""


class ConfigError(ValueError):
    """A bad key or value in the config or on the command line."""


def first_line(err: BaseException) -> str:
    """An error's message in one line (its type when it has none)."""
    return (str(err).strip().splitlines() or [type(err).__name__])[0]
