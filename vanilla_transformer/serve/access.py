"""Who may use a served model: a bearer token for the JSON API, and logins for the page (Gradio's own login, which
the JSON API accepts too, as HTTP Basic credentials). Both are read from files or environment variables, never from
a flag's value, which every user of the machine sees in `ps`. Without either, anyone who reaches the address may
translate and look inside the model: fine on 127.0.0.1, the default, and warned about beyond it.
"""

from __future__ import annotations

import base64
import hmac
import ipaddress
import os
from dataclasses import dataclass, field
from pathlib import Path

TOKEN_VARIABLE = "VANILLA_TRANSFORMER_TOKEN"
LOGINS_VARIABLE = "VANILLA_TRANSFORMER_LOGINS"  # user:password, one login a line


@dataclass(frozen=True)
class Access:
    token: str | None = field(default=None, repr=False)  # never in a log or a traceback's locals
    logins: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    @classmethod
    def read(cls, token_file: Path | None = None, logins_file: Path | None = None, environ=None) -> Access:
        """The token from `token_file` (its text, stripped), else $VANILLA_TRANSFORMER_TOKEN; the logins from
        `logins_file`, else $VANILLA_TRANSFORMER_LOGINS (user:password, one a line)."""
        environ = os.environ if environ is None else environ
        token = _read(token_file, "--token-file").strip() if token_file else environ.get(TOKEN_VARIABLE, "").strip()
        if token_file and not token:
            raise ValueError(f"--token-file {token_file} is empty: write the token into it")
        logins_text = _read(logins_file, "--logins-file") if logins_file else environ.get(LOGINS_VARIABLE, "")
        where = f"--logins-file {logins_file}" if logins_file else f"${LOGINS_VARIABLE}"
        return cls(token or None, _logins(logins_text, where))

    @property
    def open(self) -> bool:
        return self.token is None and not self.logins

    def allows(self, authorization: str | None) -> bool:
        """Whether an Authorization header lets a request through: any request when the service is open, else the
        token (Bearer) or a login (Basic)."""
        if self.open:
            return True
        scheme, _, credentials = (authorization or "").partition(" ")
        credentials = credentials.strip()
        if scheme.lower() == "bearer" and self.token is not None:
            return hmac.compare_digest(credentials.encode(), self.token.encode())
        if scheme.lower() == "basic" and self.logins:
            try:  # ValueError: not base64 (binascii.Error), not ASCII, or not UTF-8 once decoded
                user, _, password = base64.b64decode(credentials, validate=True).decode("utf-8").partition(":")
            except ValueError:
                return False
            # every login compared, so that the time taken tells nothing of which user exists
            matches = [_same(user, known) & _same(password, secret) for known, secret in self.logins]
            return any(matches)
        return False

    def challenge(self) -> str:
        """The WWW-Authenticate header of a 401: the schemes this service takes."""
        return ", ".join(
            (["Bearer"] if self.token else []) + (['Basic realm="vanilla-transformer"'] if self.logins else [])
        )

    def refusal(self) -> str:
        """What a request without the right credentials is told (no hint of what they are)."""
        ways = (["Authorization: Bearer TOKEN"] if self.token else []) + (
            ["Authorization: Basic with a login of the page"] if self.logins else []
        )
        return f"this service needs {' or '.join(ways)}"

    def warning(self, host: str | None, share: bool) -> str | None:
        """One line for a service that listens beyond this machine without a login for the page or a token for
        the JSON API, or None."""
        public = share or not _loopback(host)
        if not public:
            return None
        where = "a public share link" if share else f"{host}"
        missing = [] if self.logins else ["the page and its API have no login (--logins-file)"]
        if self.open:
            missing.append("the JSON API has no token (--token-file)")
        if not missing:
            return None
        return f"warning: serving on {where}, and {' and '.join(missing)}: anyone who can reach it may use the model"


def _loopback(host: str | None) -> bool:
    """Whether `host` is this machine only (None: Gradio's default, 127.0.0.1)."""
    if host is None or host == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:  # a name: whatever it resolves to, it was asked for by name
        return False
    mapped = getattr(address, "ipv4_mapped", None)  # ::ffff:127.0.0.1
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


def _read(path: Path, flag: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise OSError(f"{flag} {path} cannot be read: {error.strerror or error}") from None
    except UnicodeDecodeError as error:  # the text is not shown: it may hold a password
        raise ValueError(f"{flag} {path} is not UTF-8 text (byte {error.start})") from None


def _logins(text: str, where: str) -> tuple[tuple[str, str], ...]:
    logins = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        user, colon, password = line.strip().partition(":")
        if not colon or not user or not password:  # the line is not shown: it may hold a password
            raise ValueError(f"{where}: line {number} is not user:password")
        logins.append((user, password))
    return tuple(logins)


def _same(given: str, known: str) -> bool:
    return hmac.compare_digest(given.encode(), known.encode())


__all__ = ["LOGINS_VARIABLE", "TOKEN_VARIABLE", "Access"]
