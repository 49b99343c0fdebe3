"""Per-endpoint concurrency and requests/tokens-per-minute limits (sliding 60 s window)."""

from __future__ import annotations

import asyncio
import collections
import time


class EndpointLimiter:
    def __init__(self, max_concurrency: int, requests_per_minute: int = 0, tokens_per_minute: int = 0):
        self.semaphore = asyncio.Semaphore(max_concurrency)
        self.rpm = requests_per_minute
        self.tpm = tokens_per_minute
        self._requests: collections.deque[float] = collections.deque()
        self._tokens: collections.deque[tuple[float, int]] = collections.deque()
        self._lock = asyncio.Lock()
        self.in_flight = 0
        self.peak_in_flight = 0

    def _prune(self, now: float) -> None:
        while self._requests and now - self._requests[0] >= 60.0:
            self._requests.popleft()
        while self._tokens and now - self._tokens[0][0] >= 60.0:
            self._tokens.popleft()

    async def _wait_for_window(self, est_tokens: int) -> None:
        async with self._lock:  # one waiter at a time keeps the order fair
            while True:
                now = time.monotonic()
                self._prune(now)
                waits = []
                if self.rpm and len(self._requests) >= self.rpm:
                    waits.append(60.0 - (now - self._requests[0]))
                if self.tpm and self._tokens:
                    used = sum(t for _, t in self._tokens)
                    if used + est_tokens > self.tpm:
                        waits.append(60.0 - (now - self._tokens[0][0]))
                if not waits:
                    self._requests.append(now)
                    if self.tpm:
                        self._tokens.append((now, est_tokens))
                    return
                await asyncio.sleep(max(0.01, min(waits)))

    async def __aenter__(self) -> EndpointLimiter:
        await self.semaphore.acquire()
        return self

    async def acquire_window(self, est_tokens: int) -> None:
        await self._wait_for_window(est_tokens)
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)

    async def __aexit__(self, *exc) -> None:
        self.in_flight = max(0, self.in_flight - 1)
        self.semaphore.release()
