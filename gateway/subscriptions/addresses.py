"""Where a webhook may point: a real host and port, and — unless the operator allows it — a
public address only.

A webhook's URL is given by whoever holds the API token or is a chat's admin, and Iris POSTs to
it from inside the operator's network: pointed at 127.0.0.1, 169.254.169.254 (a cloud's
metadata service) or a private range, a subscription would make Iris reach what only the
operator's hosts can, and the HTTP status it records tells what answered there. So, with
`[subscriptions] webhook_private_addresses` off (the default):

- at creation, a URL whose host is such an address (or `localhost`) is refused with one line;
- at delivery, a literal address is checked again (a subscription made before, or with the
  setting on), and a host name is resolved through `PublicResolver`, which hands aiohttp only
  the public addresses it resolves to — the connection goes to one of those, so a name that
  resolves differently the second time (DNS rebinding) gains nothing.

A receiver on the same host or network (a test, a LAN service) needs the setting on.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from urllib.parse import urlsplit

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult

# A DNS name: labels of letters, digits and inner hyphens.
_LABEL = r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)"
_HOSTNAME = re.compile(rf"{_LABEL}(\.{_LABEL})*\.?")
PRIVATE_HINT = (
    "set [subscriptions] webhook_private_addresses = true for a receiver on this host or network"
)


def is_public(address: str) -> bool:
    """Whether `address` (an IP literal) is a global unicast address."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    return ip.is_global and not ip.is_multicast


def url_problem(url: str, *, private_ok: bool) -> str | None:
    """Why a webhook cannot be delivered to `url` (None: it can be tried)."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        return "its port is not a number from 1 to 65535"
    if port == 0:
        return "its port is not a number from 1 to 65535"
    host = parts.hostname or ""
    try:
        ipaddress.ip_address(host)
        literal = True
    except ValueError:
        literal = False
    if not literal and not _HOSTNAME.fullmatch(host):
        return "its host is not a host name or an address"
    if private_ok:
        return None
    local_name = host.rstrip(".").lower()
    if local_name == "localhost" or local_name.endswith(".localhost"):
        return f"{host} is this host ({PRIVATE_HINT})"
    if literal and not is_public(host):
        return f"{host} is a private, local or reserved address ({PRIVATE_HINT})"
    return None


class PublicResolver(AbstractResolver):
    """aiohttp's threaded resolver, keeping the public addresses only."""

    def __init__(self) -> None:
        self._inner = aiohttp.ThreadedResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        found = await self._inner.resolve(host, port, family)
        kept = [a for a in found if is_public(a["host"])]
        if not kept:
            raise OSError(f"{host} resolves to no public address")
        return kept

    async def close(self) -> None:
        await self._inner.close()
