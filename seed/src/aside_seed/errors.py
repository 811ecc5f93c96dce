"""The two ways aside-seed fails: both end as one line on stderr, never a traceback."""


class SeedError(Exception):
    """A failure at run time (database, files): exit status 1."""


class UsageError(SeedError):
    """A bad argument or environment variable: exit status 2."""
