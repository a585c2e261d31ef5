"""The one error tree of Iris. Foreign exceptions are mapped into it at the edge.

    IrisError
    ├── ConfigError                 bad or missing configuration (exit code 2, before start)
    ├── VaultError                  the vault failed or is in an unusable state
    │   └── SchemaTooNew            the vault was migrated by a newer Iris (exit code 2)
    ├── UserInputError              a person typed something we can't use; `user_message` is safe
    │   ├── UnknownCommand
    │   ├── NotAllowed
    │   ├── NotFound                an id that names nothing (HTTP 404)
    │   ├── WrongState              an action the item's state forbids (HTTP 409)
    │   └── OverBudget              a model call refused by a spending limit (`[limits]`)
    ├── ModelError                  the language model could not answer
    │   ├── ModelNotConfigured      no API key
    │   ├── ModelUnavailable        transient: rate limit, overload, timeout, connection
    │   │   └── ModelKeyRejected    the API refused the key (401): answers resume once fixed
    │   └── ModelRejected           definite: bad request, refusal we can't recover from
    ├── ToolError                   a tool call failed; reported to the model as is_error
    └── DeliveryError               a channel could not deliver
        ├── DeliveryTransient       worth retrying (rate limit, network); may carry retry_after_s
        ├── DeliveryUncertain       the send may or may not have happened (timeout after write)
        └── DeliveryPermanent       never retry (blocked by the user, chat gone)
            └── ChatUnreachable
    ChannelUnavailable              a channel lost its platform link; its supervisor restarts it
    FatalChannelError               a channel can never work with this config (bad token)

Users only ever see the fixed texts chosen by the edge that handles an error, or
`UserInputError.user_message`, which is written for them — never `str(exc)`.
"""

from __future__ import annotations


class IrisError(Exception):
    """Root of every error Iris raises on purpose."""


class ConfigError(IrisError):
    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


class VaultError(IrisError):
    pass


class SchemaTooNew(VaultError):
    """The vault's schema is newer than this Iris knows (another replica was upgraded first):
    refusing to start is the only safe answer, naming both versions."""

    def __init__(self, found: int, known: int) -> None:
        super().__init__(
            f"vault schema version {found} is newer than this Iris ({known}); "
            "upgrade Iris or restore a backup"
        )
        self.found = found
        self.known = known


class UserInputError(IrisError):
    """An input problem with a message meant for the person who typed it."""

    def __init__(self, user_message: str) -> None:
        super().__init__(user_message)
        self.user_message = user_message


class UnknownCommand(UserInputError):
    pass


class NotAllowed(UserInputError):
    pass


class NotFound(UserInputError):
    pass


class WrongState(UserInputError):
    pass


class OverBudget(UserInputError):
    """A model call refused before it was made: a budget of `[limits]` is used up.

    `user_message` says which budget and when it resets in the user's time zone; `limit` names
    the limit (`user_usd_per_day`, ...) and `window` the period it counts (`2026-03-08`), so a
    caller can tell the user once per window and record why proactive work was skipped.
    """

    def __init__(self, user_message: str, *, limit: str, window: str, resets_at_ms: int) -> None:
        super().__init__(user_message)
        self.limit = limit
        self.window = window
        self.resets_at_ms = resets_at_ms


class ModelError(IrisError):
    pass


class ModelNotConfigured(ModelError):
    pass


class ModelUnavailable(ModelError):
    """Transient: the model may answer later; `retry_after_s` is how long the API asked to
    wait, when it said."""

    def __init__(self, message: str = "", retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class ModelKeyRejected(ModelUnavailable):
    """The model API refused the API key. Unavailable rather than rejected: the same request
    succeeds once an admin fixes the key, so callers treat it like an outage (apology now,
    proactive work later); `ModelHealth` reports it and admins are told."""


class ModelRejected(ModelError):
    """Definite: retrying the same request will not help. `status` is the API's HTTP status,
    when it answered with one."""

    def __init__(self, message: str = "", status: int | None = None) -> None:
        super().__init__(message)
        self.status = status

    @property
    def refuses_model(self) -> bool:
        """The API refuses the configured model itself (403, 404): every call fails alike."""
        return self.status in (403, 404)


class ToolError(IrisError):
    """A tool failed; the text goes back to the model as an `is_error` tool result."""


class DeliveryError(IrisError):
    pass


class DeliveryTransient(DeliveryError):
    """Not delivered, worth retrying. `sent`: the platform ids of the message's chunks that
    did go out before this one failed (a long reply), so a retry sends only the rest."""

    def __init__(
        self, message: str, retry_after_s: float | None = None, sent: tuple[str, ...] = ()
    ) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
        self.sent = sent


class DeliveryUncertain(DeliveryError):
    pass


class DeliveryPermanent(DeliveryError):
    pass


class ChatUnreachable(DeliveryPermanent):
    pass


class AddressInUse(IrisError):
    """A port Iris must listen on is taken, most likely for a while only (another process,
    an older Iris still stopping): not a configuration error, so a service manager retries."""


class FatalChannelError(IrisError):
    """A channel can never work with the current configuration (e.g. an invalid token)."""


class ChannelUnavailable(IrisError):
    """Transient: a channel lost its link to the platform; the app restarts it with backoff."""


class ChannelConflict(ChannelUnavailable):
    """Another client holds the platform's one receiving connection (Telegram answers 409 to a
    second `getUpdates` poller on the same token): an alarm, retried with backoff."""
