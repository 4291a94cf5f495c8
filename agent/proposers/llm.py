"""The `llm` proposer: one chat completion per attempt from any OpenAI-compatible endpoint.

The API key is read from the environment at call time (OPENAI_API_KEY or --api-key-env NAME)
and lives only in the client object: it is never written to the session, and the harness
scrubs it from every candidate's environment. Retries with exponential backoff on 429, 5xx,
timeouts and dropped connections; after the limit the proposal comes back `transient`, and
the loop records an error and backs off instead of dying.
"""
from __future__ import annotations

import os
import random
import threading
import time
from typing import Any

import openai

from agent.config import RunConfig
from agent.proposers.base import Proposal, ProposalContext, cost_usd
from agent.proposers.edits import parse_reply
from agent.proposers.prompt import SYSTEM, build_prompt, first_line_summary

MAX_BACKOFF_S = 60.0
TRANSCRIPT_REPLY_CHARS = 256 * 1024   # a longer reply is kept in the transcript only in part


class ReplyDeadline(openai.OpenAIError):
    """No complete reply within the timeout: the client's own timeout is per read, so a server that
    sends a byte now and then would otherwise hold the proposal forever."""


def _retryable(exc: Exception) -> bool:
    if isinstance(exc, (openai.APITimeoutError, openai.APIConnectionError, openai.RateLimitError, ReplyDeadline,
                        ValueError)):
        return True
    return isinstance(exc, openai.APIStatusError) and exc.status_code >= 500


def _describe(exc: Exception) -> str:
    if isinstance(exc, ReplyDeadline):
        return str(exc)
    if isinstance(exc, ValueError):   # a body that is not the JSON the client expects
        return f"the endpoint sent an unreadable reply ({type(exc).__name__}: {str(exc)[:120]})"
    if isinstance(exc, openai.APITimeoutError):
        return "the request timed out"
    if isinstance(exc, openai.APIConnectionError):
        return f"cannot reach the endpoint ({exc.__cause__ or exc})"
    if isinstance(exc, openai.APIStatusError):
        body = str(getattr(exc, "message", "") or exc)
        return f"HTTP {exc.status_code}: {' '.join(body.split())[:200]}"
    return f"{type(exc).__name__}: {exc}"


class LlmProposer:
    name = "llm"
    prefetch = True

    def __init__(self, cfg: RunConfig):
        self.cfg = cfg
        self._client: openai.OpenAI | None = None

    def client(self) -> openai.OpenAI:
        if self._client is None:
            key = os.environ.get(self.cfg.api_key_env, "")
            if not key and not self.cfg.base_url:
                raise openai.OpenAIError(f"no API key: set {self.cfg.api_key_env} (or --api-key-env NAME)")
            # Local OpenAI-compatible servers often need no key, but the client insists on one.
            self._client = openai.OpenAI(api_key=key or "unused", base_url=self.cfg.base_url,
                                         timeout=self.cfg.llm_timeout_s, max_retries=0)
        return self._client

    def _request(self, prompt: str) -> Any:
        kw: dict[str, Any] = {}
        if self.cfg.llm_max_tokens:
            kw["max_tokens"] = self.cfg.llm_max_tokens
        if self.cfg.llm_temperature is not None:
            kw["temperature"] = self.cfg.llm_temperature
        return self.client().chat.completions.create(
            model=str(self.cfg.model),
            messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}], **kw)

    def _request_within(self, prompt: str, cancel: threading.Event) -> Any:
        """`_request` with a deadline on the whole reply; None if cancelled first."""
        box: list[tuple[bool, Any]] = []

        def call() -> None:
            try:
                box.append((True, self._request(prompt)))
            except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
                box.append((False, exc))
        worker = threading.Thread(target=call, daemon=True, name="steer-llm-request")
        worker.start()
        deadline = time.monotonic() + self.cfg.llm_timeout_s
        while worker.is_alive() and not cancel.is_set() and time.monotonic() < deadline:
            worker.join(0.1)
        if not box:
            self._drop_client()   # a fresh client next time; the stuck read ends when its server lets go
            if cancel.is_set():
                return None
            raise ReplyDeadline(f"the request timed out: no complete reply within {self.cfg.llm_timeout_s:g} s")
        ok, value = box[0]
        if not ok:
            raise value
        return value

    def _drop_client(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            try:
                client.close()
            except Exception:  # noqa: BLE001 - closing is best effort
                pass

    def propose(self, ctx: ProposalContext, cancel: threading.Event | None = None) -> Proposal:
        started = time.monotonic()
        cancel = cancel or threading.Event()
        prompt = build_prompt(ctx, self.cfg.history)
        log = [f"model: {self.cfg.model} at {self.cfg.base_url or 'the OpenAI API'}", "----- prompt -----", prompt]
        rng = random.Random(f"{ctx.seed}:{ctx.iteration}")
        response, last_error = None, ""
        for attempt in range(self.cfg.llm_retries + 1):
            if cancel.is_set():
                return Proposal(None, error="aborted", transcript="\n".join(log), transient=True,
                                duration_s=time.monotonic() - started)
            try:
                response = self._request_within(prompt, cancel)
                if response is None:
                    return Proposal(None, error="aborted", transcript="\n".join(log), transient=True,
                                    duration_s=time.monotonic() - started)
                break
            except (openai.OpenAIError, ValueError) as exc:
                last_error = _describe(exc)
                log.append(f"----- try {attempt + 1} failed: {last_error}")
                if not _retryable(exc):
                    return Proposal(None, error=f"endpoint refused the request: {last_error}",
                                    transcript="\n".join(log), transient=True, duration_s=time.monotonic() - started)
                if attempt < self.cfg.llm_retries:
                    wait = min(MAX_BACKOFF_S, self.cfg.llm_backoff_s * 2 ** attempt) * (0.8 + 0.4 * rng.random())
                    log.append(f"retrying in {wait:.1f} s")
                    cancel.wait(wait)   # returns early on abort; the loop's top then reports it
        if response is None:
            return Proposal(None, error=f"endpoint failed {self.cfg.llm_retries + 1} times; last: {last_error}",
                            transcript="\n".join(log), transient=True, duration_s=time.monotonic() - started)
        usage = getattr(response, "usage", None)
        t_in = int(getattr(usage, "prompt_tokens", 0) or 0)
        t_out = int(getattr(usage, "completion_tokens", 0) or 0)
        cost = cost_usd(t_in, t_out, self.cfg.price_in_per_mtok, self.cfg.price_out_per_mtok)
        try:
            reply = response.choices[0].message.content or ""
        except (AttributeError, IndexError, TypeError):
            reply = ""
        shown = reply if len(reply) <= TRANSCRIPT_REPLY_CHARS else (
            reply[:TRANSCRIPT_REPLY_CHARS] + f"\n[... {len(reply) - TRANSCRIPT_REPLY_CHARS} more characters not kept]")
        log += ["----- reply -----", shown, f"----- tokens: {t_in} in, {t_out} out, ${cost:.4f}"]
        parsed = parse_reply(reply, ctx.code)
        summary = first_line_summary(reply) or f"llm edit ({parsed.how or 'unparsed'})"
        if parsed.code is None:
            log.append(f"----- unusable reply: {parsed.error}")
        return Proposal(code=parsed.code, summary=summary, transcript="\n".join(log) + "\n",
                        error=None if parsed.code is not None else f"unusable reply: {parsed.error}",
                        tokens_in=t_in, tokens_out=t_out, cost_usd=cost, duration_s=time.monotonic() - started)
