"""The one error type for user mistakes: caught at the entry point, printed as one line."""


class ConfigError(ValueError):
    """A bad key or value in the config or on the command line."""


def did_you_mean(word: str, choices, cutoff: float = 0.6, first: tuple[str, ...] = ()) -> str:
    """' Did you mean: a, b?' for `first` and up to three close matches of `word` among `choices`; or ''."""
    import difflib

    close = [*first, *difflib.get_close_matches(word, list(choices), n=3, cutoff=cutoff)]
    return f" Did you mean: {', '.join(close)}?" if close else ""


def first_line(err: BaseException) -> str:
    """An error's message in one line (its type when it has none)."""
    return (str(err).strip().splitlines() or [type(err).__name__])[0]
