"""Secrets are masked in everything nsightwrap writes; the command run keeps them.

A profiled program's command line often carries a credential (``--token=...``,
``HF_TOKEN=... python train.py``, ``--db postgres://me:pw@host/db``). nsightwrap
keeps command lines in the hang store, prints them in ``--json``, ``hangs
show|export``, the debug log and its messages; each of those goes through
this module, so that the value is written as :data:`MASK`:

- an argument ``--NAME=VALUE`` or ``-NAME=VALUE``, and ``--NAME VALUE`` (the
  next argument), where NAME looks secret;
- ``NAME=VALUE`` (an environment assignment, as ``env`` takes), same rule;
- the password of a URL: ``scheme://user:***@host``;
- ``Bearer VALUE``, and the credential of an ``Authorization:`` header (``Authorization: Basic ***``,
  ``Authorization: ***``), and the value of a header whose name looks secret (``X-Api-Key: ***``,
  ``Private-Token: ***``, ``password: ***``; a bare short word such as ``key:`` is left as it is), also
  quoted as in a dict's repr or JSON (``{'Authorization': 'Basic ***'}``, ``"X-Api-Key": "***"``);
- in a document (:func:`mask_doc`), a string under a secret-looking key (``{"HF_TOKEN": "***"}``; not a
  bare short word such as ``key``).

A name looks secret when its last word (split at ``-``, ``_``, ``.``) is a
short secret word (``key``, ``auth``, ``pwd``, ``pass``), or ends with
a long one (``token``, ``password``, ``passwd``, ``secret``, ``credential``,
``apikey``...), or when any of its words holds ``secret`` and its last word
does not say what else the value is (``MY_SECRET_VALUE``, ``SECRET_DATA``):
``--token``, ``--api-key``, ``AWS_SECRET_ACCESS_KEY``,
``PGPASSWORD``, ``--auth-token``; not ``--tokenizer``, ``--max-tokens``,
``--kernel-name`` nor ``--key-size`` / ``--auth-mode`` / ``--secret-file``
(the last word says what the value is: a size, a mode, a path). The hang store keeps the masked command
line, so runs that differ only in a secret's value share their records.
Short options (``-p 123``) are not masked: their meaning is the program's own
(a port, a path, a password).

Imports nothing from the package: every layer may mask.
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

__all__ = ["MASK", "is_secret_name", "mask_argv", "mask_doc", "mask_text"]

#: What a secret's value is written as.
MASK = "***"

_SHORT_WORDS = frozenset({"key", "auth", "pwd", "pass"})
_LONG_WORDS = ("token", "password", "passwd", "passphrase", "secret", "credential", "credentials", "apikey",
               "accesskey", "privatekey", "secretkey", "authkey")
_NAME = r"[A-Za-z_][A-Za-z0-9_.-]*"
#: NAME=VALUE or -NAME=VALUE / --NAME=VALUE at the start of a word; or --NAME VALUE (two dashes, text only).
_ASSIGNMENT = re.compile(rf"(?<![\w./-])(-{{0,2}}{_NAME})=([^\s'\"]+)")
_SPACED = re.compile(rf"(?<![\w./-])(--{_NAME})(\s+)(?!-)([^\s'\"]+)")
_URL_PASSWORD = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://[^\s/:@]*:)([^\s/@]+)(@)")
_BEARER = re.compile(r"(\bBearer\s+)([A-Za-z0-9._~+/=-]+)", re.IGNORECASE)
#: ``Authorization: [SCHEME] CREDENTIAL`` (an HTTP header, e.g. curl's -H); the scheme is kept.
#: The name may be quoted, as in a dict's repr or JSON (``{'Authorization': 'Basic x'}``).
_AUTHORIZATION = re.compile(r"(\b(?:Proxy-)?Authorization['\"]?:\s*['\"]?(?:(?:Bearer|Basic|Digest|Token|Negotiate|"
                            r"Bot|AWS4-HMAC-SHA256)\s+)?)([^\s'\"]+)", re.IGNORECASE)
#: ``NAME: VALUE`` with a secret-looking NAME (``X-Api-Key: abc``, ``password: abc``).
#: Quoted as in a dict's repr or JSON too (``{'X-Api-Key': 'abc'}``, ``{"token":"abc"}``).
_HEADER = re.compile(rf"(?<![\w./-])({_NAME})(['\"]?):([ \t]*)(['\"]?)([^\s'\"]+)")
#: Last words that say what a value holding "secret" is, when it is not the secret itself.
_DESCRIPTIVE = frozenset({"file", "path", "dir", "name", "id", "size", "mode", "count", "type", "len", "length"})


def is_secret_name(name: str) -> bool:
    """Does this option or variable name (dashes allowed) look like it holds a secret?"""
    words = [w for w in re.split(r"[-_.]+", name.strip("-").lower()) if w]
    if not words:
        return False
    if words[-1] in _SHORT_WORDS or words[-1].endswith(_LONG_WORDS):
        return True
    return words[-1] not in _DESCRIPTIVE and any("secret" in w for w in words)


def _is_secret_key(name: str) -> bool:
    """A header's or a document's key that names a secret; a bare short word (``key:``) does not."""
    return is_secret_name(name) and name.strip("-").lower() not in _SHORT_WORDS


def _header(m: re.Match) -> str:
    name, close, space, open_ = m.group(1), m.group(2), m.group(3), m.group(4)
    if not space and not (close and open_):  # ``name:value`` unquoted and unspaced is no header
        return m.group(0)
    return f"{name}{close}:{space}{open_}{MASK}" if _is_secret_key(name) else m.group(0)


def _mask_urls(text: str) -> str:
    """URL passwords, bearer tokens and the credentials of headers (Authorization:, X-Api-Key: ...)."""
    text = _URL_PASSWORD.sub(lambda m: m.group(1) + MASK + m.group(3), text)
    text = _AUTHORIZATION.sub(lambda m: m.group(1) + MASK, _BEARER.sub(lambda m: m.group(1) + MASK, text))
    return _HEADER.sub(_header, text)


def mask_text(text: str) -> str:
    """`text` (a message, a log line, a joined command line) with secret values replaced by MASK."""
    if not isinstance(text, str) or not text:
        return text
    text = _mask_urls(text)
    text = _ASSIGNMENT.sub(lambda m: f"{m.group(1)}={MASK}" if is_secret_name(m.group(1)) else m.group(0), text)
    return _SPACED.sub(lambda m: m.group(1) + m.group(2) + MASK if is_secret_name(m.group(1)) else m.group(0), text)


def _is_option(arg: str) -> bool:
    return arg.startswith("--") and len(arg) > 2 and "=" not in arg


def mask_argv(argv: Sequence[str]) -> list[str]:
    """A command line as it may be written: each secret value replaced by MASK (see the module's rules)."""
    out: list[str] = []
    hide_next = False
    for arg in (str(a) for a in argv):
        if hide_next and not _is_option(arg):
            out.append(MASK)
            hide_next = False
            continue
        hide_next = _is_option(arg) and is_secret_name(arg)
        name, eq, _ = arg.partition("=")
        if eq and re.fullmatch(rf"-{{0,2}}{_NAME}", name) and is_secret_name(name):
            out.append(f"{name}={MASK}")
        else:
            out.append(_mask_urls(arg))
    return out


#: Keys of a document whose strings are kernel names, kept as ncu printed them (``void f<key=1>`` is no secret).
_KERNEL_KEYS = frozenset({"name", "kernel", "stalled_kernel"})


def _masked_item(key: Any, value: Any) -> Any:
    if isinstance(key, str) and isinstance(value, str) and value and _is_secret_key(key):
        return MASK  # {"HF_TOKEN": "abc"}: the value itself is the secret
    if key in ("command", "argv") and isinstance(value, (list, tuple)) and all(isinstance(a, str) for a in value):
        return mask_argv(value)
    if key in _KERNEL_KEYS and isinstance(value, str):
        return value
    return mask_doc(value)


def mask_doc(doc: Any) -> Any:
    """A JSON-able document as it may be written: a string under a secret-looking key masked whole, lists under
    a key ``command`` or ``argv`` masked as command lines, kernel names kept, every other string masked as
    text."""
    if isinstance(doc, Mapping):
        return {k: _masked_item(k, v) for k, v in doc.items()}
    if isinstance(doc, (list, tuple)):
        return [mask_doc(v) for v in doc]
    return mask_text(doc) if isinstance(doc, str) else doc
