"""Which hang store: an SQLite file (the embedded default) or a team's PostgreSQL database, resolved once.

The setting is found by one visible precedence (:func:`resolve_store`):

1. the ``store=`` parameter of the library (``HangStore(x)``, ``Profiler(store=x)``), or
2. the command line's ``--store`` (the CLI passes it as that parameter: a program has one or the other),
3. ``$NSIGHTWRAP_STORE``,
4. the default file, ``$XDG_CACHE_HOME/nsightwrap/hangs.db`` (else ``~/.cache/nsightwrap/hangs.db``).

A value with a scheme (``postgresql://user:pw@host/db``, ``postgresql+psycopg://...``) is a database URL;
anything else is a file path (``~`` expanded). A URL's password (``user:pw@`` or ``?password=pw``) is a
secret: :class:`StoreLocation` keeps it for the connection only, and its ``str``, ``repr`` and every message
show it masked (nsightwrap.secrets.MASK).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Optional, Union
from urllib.parse import unquote, unquote_plus

from nsightwrap.errors import StoreError
from nsightwrap.paths import cache_dir
from nsightwrap.secrets import MASK, mask_text
from nsightwrap.store.paths import ENV_STORE, STORE_NAME

__all__ = ["POSTGRES_EXTRA", "StoreLocation", "StoreUnreachable", "is_url", "local_default", "mask_url",
           "resolve_store"]

#: What to install for a PostgreSQL store (the extra of pyproject.toml).
POSTGRES_EXTRA = "pip install 'nsightwrap[postgres]'"
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_POSTGRES_SCHEMES = ("postgresql", "postgres", "postgresql+psycopg")
#: A password given in a URL's query (libpq takes ``?password=``): group 2 is its value, up to ``&`` or ``#``.
_QUERY_PASSWORD = re.compile(r"([?&]password=)([^&#]*)", re.IGNORECASE)

class StoreUnreachable(StoreError):
    """The store's database server cannot be reached (down, wrong host or port, refused login)."""


StoreArg = Union[str, "os.PathLike[str]", "StoreLocation", None]


def is_url(value: object) -> bool:
    """Is this store setting a database URL (it has a ``scheme://``) rather than a file path?"""
    return isinstance(value, str) and bool(_SCHEME.match(value.strip()))


@dataclass(frozen=True)
class StoreLocation:
    """Where the hang store is: ``path`` (an SQLite file) or ``url`` (a PostgreSQL database), and which
    setting named it (``source``: "parameter", "NSIGHTWRAP_STORE" or "default")."""

    path: Optional[Path] = None
    url: Optional[str] = field(default=None, repr=False)  # holds the password: never printed
    source: str = "parameter"

    def __post_init__(self) -> None:
        if (self.path is None) == (self.url is None):
            raise ValueError("a StoreLocation is a path or a URL, exactly one of them")
        if self.url is not None:
            scheme = self.url.split("://", 1)[0].lower()
            if scheme not in _POSTGRES_SCHEMES:
                raise StoreError(None, f"the hang store {self.shown} is a {scheme} URL: nsightwrap keeps hangs in "
                                 "an SQLite file or a PostgreSQL database. Give a postgresql://user@host/db URL "
                                 f"or a file path (--store or {ENV_STORE}).")

    @property
    def is_database(self) -> bool:
        return self.url is not None

    @property
    def shown(self) -> str:
        """The location as it may be printed: the file, or the URL with its password masked."""
        return str(self.path) if self.path is not None else mask_url(self.url or "")

    @property
    def password(self) -> Optional[str]:
        """The URL's password (for masking it in text that the driver wrote), if any: the one before ``@``,
        else a ``?password=`` (or ``&password=``) of its query."""
        if self.url is None:
            return None
        before_at = re.match(r"^[^:/]+://[^/@]*?:([^/@]*)@", self.url)
        if before_at and before_at.group(1):
            return before_at.group(1)
        query = _QUERY_PASSWORD.search(self.url)
        return query.group(2) if query and query.group(2) else None

    def mask(self, text: str) -> str:
        """`text` (a driver's message) with this location's password masked, wherever it appears (as written
        in the URL, and percent-decoded as the driver got it)."""
        secret = self.password
        text = mask_text(text)
        for form in dict.fromkeys((secret, unquote(secret), unquote_plus(secret)) if secret else ()):
            text = text.replace(form, MASK) if form else text
        return text

    def sqlalchemy_url(self) -> str:
        """The URL for SQLAlchemy: PostgreSQL through psycopg 3 whatever the scheme's spelling."""
        scheme, rest = (self.url or "").split("://", 1)
        return ("postgresql+psycopg://" if scheme.lower() in _POSTGRES_SCHEMES else scheme + "://") + rest

    def __str__(self) -> str:
        return self.shown

    def __repr__(self) -> str:
        return f"StoreLocation({self.shown!r}, source={self.source!r})"


def mask_url(url: str) -> str:
    """A URL with its password masked: ``user:***@host``, and ``?password=***`` in its query."""
    url = re.sub(r"^([^:/]+://[^/@:]*:)[^/@]*@", lambda m: m.group(1) + MASK + "@", url)
    return _QUERY_PASSWORD.sub(lambda m: m.group(1) + MASK, url)


def local_default(env: Optional[Mapping[str, str]] = None) -> Path:
    """The default SQLite file, whatever NSIGHTWRAP_STORE says: where a run records when the database is down."""
    return cache_dir(os.environ if env is None else env) / STORE_NAME


def _of(value: Union[str, "os.PathLike[str]"], source: str) -> StoreLocation:
    if is_url(value):
        return StoreLocation(url=str(value).strip(), source=source)
    return StoreLocation(path=Path(value).expanduser(), source=source)


def resolve_store(given: StoreArg = None, env: Optional[Mapping[str, str]] = None) -> StoreLocation:
    """The store to use: `given` (the ``store=`` parameter or ``--store``) when not None or empty, else
    ``$NSIGHTWRAP_STORE`` of `env` (default: os.environ), else the default file (see the module)."""
    if isinstance(given, StoreLocation):
        return given
    if given:
        return _of(given, "parameter")
    env = os.environ if env is None else env
    if env.get(ENV_STORE):
        return _of(env[ENV_STORE], ENV_STORE)
    return StoreLocation(path=local_default(env), source="default")
