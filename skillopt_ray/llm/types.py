"""The errors the LLM layer raises (the request and reply records it carries are the benchmarks' contract's:
skillopt_envs.chat).

Errors carry only plain strings so they pickle across Ray actor boundaries;
messages name the endpoint, the model and the fix, never a key.
"""

from __future__ import annotations

from skillopt_ray.base.disk import FULL_DISK_FIX, disk_full, error_text


class LLMError(Exception):
    """Base class; `fatal` errors stop the run."""

    fatal = True

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message

    def __reduce__(self):
        return (self.__class__, (self.message,))


class LLMConfigError(LLMError):
    """Missing key, unknown provider, bad endpoint settings."""


class LLMRequestRejected(LLMError):
    """Non-retryable HTTP error (400/401/403/404)."""


class BudgetExceeded(LLMError):
    """A budget cap was hit; the run stops cleanly and can resume with a higher cap."""


class CacheMiss(LLMError):
    """Replay mode found no recorded response for a request."""


class MalformedOutput(LLMError):
    """The model's reply could not be parsed/validated, even after one re-ask.

    Not fatal, nor are its subclasses (a call that brought no usable reply): an optimizer stage takes its
    fallback (an analyst's minibatch yields nothing, a merge concatenates, a ranking keeps the first N, a slow
    update or meta skill is skipped, each with the error recorded); an episode is retried, then recorded as an
    infra error of its kind, kept out of the means (the run stops past optimizer.max_infra_failure_fraction)."""

    fatal = False


class LLMUnavailable(MalformedOutput):
    """Retries exhausted: the endpoint is down, overloaded or timing out. One call's bad luck is not the run's:
    a subclass of MalformedOutput so the stage falls back, or the episode is an infra error (kind `llm`).

    `unread`: attempts the endpoint answered with HTTP 200 whose body was cut off in transit (billed, never read),
    with the bytes that arrived; they travel with the error (across actors too) so the ledger can count them."""

    def __init__(self, message: str, unread: int = 0, unread_bytes: int = 0):
        super().__init__(message)
        self.unread = unread
        self.unread_bytes = unread_bytes

    def __reduce__(self):
        return (self.__class__, (self.message, self.unread, self.unread_bytes))


class ReplyIncomplete(MalformedOutput):
    """The endpoint ended the reply itself: not the model's answer, not the model's failure.

    A subclass of MalformedOutput so optimizer stages fall back as for an unusable reply; in a
    rollout it is a non-fatal LLM error, so the episode is retried and then recorded as an infra error.
    """

    kind = "incomplete"


class ReplyTruncated(ReplyIncomplete):
    """finish_reason=length: the completion budget ran out (after one retry with twice the budget)."""

    kind = "truncated"


class ReplyFiltered(ReplyIncomplete):
    """finish_reason=content_filter, or a request refused by the provider's content filter."""

    kind = "filtered"


class LLMInternalError(LLMError):
    """An unexpected exception inside the gateway, turned into one line so no Ray trace reaches the user."""


class GatewayLost(LLMError):
    """The LLM gateway actor (or one of its sender shards) died, e.g. with its node: no episode can call the model."""


class StoreUnwritable(LLMError):
    """The run's response cache or the ledger's journal could not be written (a full disk, most often). A paid reply
    that cannot be kept is paid again by the rerun, so from the first failed write on the gateway sends no new paid
    call: each raises this (fatal: the run stops), while calls already sent still bring their replies to their
    callers."""


def unwritable(what: str, where: str, err: BaseException) -> StoreUnwritable:
    """The one-line error for a store that could not be written: what failed, why, where, and the fix."""
    head = "the disk is full: " if disk_full(err) else ""
    fix = FULL_DISK_FIX if head else "check the disk, then rerun the same command to resume"
    return StoreUnwritable(
        f"{head}{what} could not be written ({error_text(err)}; {where}), so no new model call is sent (the rerun "
        f"would pay again for a reply not kept): {fix}"
    )
