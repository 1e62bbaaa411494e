"""A serving engine's scheduler, iteration by iteration: in-flight batching with chunked prefill and a paged
K/V cache, as TensorRT-LLM, vLLM and SGLang run it.

Each iteration packs, up to the token budget (`max_tokens_per_step`): one decode token for every running
request first (prefill never stalls decode), then prompt chunks, those already being prefilled before newly
admitted ones (first come, first served). A request is admitted while the replica runs fewer than `max_batch`
and the cache is sure to hold every running request to its end with this one too (TensorRT-LLM's
guaranteed-no-evict policy; vLLM and SGLang admit more eagerly and preempt); its K/V blocks are taken as its
context grows. Should the cache still fill, the newest running request is preempted: its blocks are freed and
it waits at the head of the queue, to be prefilled again (prompt and the tokens generated so far). A request
whose prompt and output could not fit the cache even alone is refused on arrival, as the engines refuse it.
A prompt's last chunk produces its first token; each later iteration one more, until its output length.

An iteration costs engine/model/serving_cost.py's `IterationCost`. Between events (an arrival that can be
admitted, a request finishing, the cache filling) every iteration is the same batch one token of context
longer per request, so runs of them are taken in one step, in closed form (the cost is linear in the
context): a replica serving for minutes costs a few thousand steps.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from .serving_cost import Iteration, IterationCost
from .serving_memory import BLOCK_TOKENS

WATERMARK = 0.01            # share of the cache kept free when admitting (vLLM's watermark)


@dataclass
class Requests:
    """The requests one replica serves, in arrival order."""

    arrival: np.ndarray           # seconds
    prompt: np.ndarray            # tokens
    output: np.ndarray            # tokens to generate (>= 1)

    def __len__(self) -> int:
        return int(self.arrival.size)


@dataclass
class Outcome:
    """What happened to every request, and the iterations' totals."""

    first: np.ndarray             # time of the first token (NaN: never)
    done: np.ndarray              # time of the last token (NaN: never)
    preemptions: int = 0
    rejected: int = 0             # requests longer than the whole cache: refused on arrival, as engines do
    # (start, seconds, iterations, decode tokens per iteration, prefill tokens in all, context per iteration,
    # prefill attention work in all) of each step
    trace: list[tuple[float, float, int, int, int, float, float]] = field(default_factory=list)


class Engine:
    """One replica's scheduler over `requests`, with iteration costs `cost`, a K/V pool of `kv_tokens`."""

    def __init__(self, cost: IterationCost, kv_tokens: int, budget: int, max_batch: int) -> None:
        self.cost, self.capacity, self.budget, self.max_batch = cost, kv_tokens, budget, max_batch
        self.watermark = int(WATERMARK * kv_tokens)

    def run(self, req: Requests) -> Outcome:
        n = len(req)
        first = np.full(n, np.nan)
        done = np.full(n, np.nan)
        out = Outcome(first, done)
        s = _State(req)
        arrival = req.arrival
        t = 0.0
        while s.next_arrival < n or s.queue or s.prefilling or s.decoding:
            while s.next_arrival < n and arrival[s.next_arrival] <= t:
                if self._fits_alone(s, s.next_arrival):
                    s.queue.append(s.next_arrival)
                else:
                    out.rejected += 1
                s.next_arrival += 1
            if not (s.queue or s.prefilling or s.decoding):
                if s.next_arrival == n:                      # the last arrivals were refused
                    break
                t = float(arrival[s.next_arrival])          # idle until the next request arrives
                continue
            out.preemptions += self._make_room(s)
            chunks = self._chunks(s)
            if not chunks and self._can_skip(s):
                t = self._decode_run(s, t, out, req)
                continue
            t = self._iteration(s, t, chunks, out, req)
        return out

    def _fits_alone(self, s: _State, rid: int) -> bool:
        """Whether the request's whole context fits the cache with nothing else running (else no schedule
        ever serves it: vLLM and TensorRT-LLM refuse it)."""
        return int(s.prompt[rid] + s.left[rid]) + BLOCK_TOKENS // 2 + self.watermark <= self.capacity

    # ---- one iteration -----------------------------------------------------------------------------------

    def _make_room(self, s: _State) -> int:
        """Preempt the newest decoding requests until the cache takes this iteration's decode tokens."""
        preempted = 0
        while s.n_dec > 0 and s.kv_used() + s.n_dec > self.capacity:   # n_dec: live requests only
            s.preempt_newest()
            preempted += 1
        return preempted

    def _chunks(self, s: _State) -> list[tuple[int, int, int]]:
        """This iteration's prompt chunks (request, tokens, prefix): continued prefills first, then newly
        admitted requests, up to the token budget, the batch limit and the free cache."""
        room = self.budget - s.n_dec
        free = self.capacity - s.kv_used() - s.n_dec
        chunks: list[tuple[int, int, int]] = []
        for entry in s.prefilling:
            if room <= 0 or free <= 0:
                return chunks
            rid, left, prefix = entry
            take = min(left, room, free)
            chunks.append((rid, take, prefix))
            room -= take
            free -= take
        committed = s.committed()
        while s.queue and room > 0 and s.n_dec + len(s.prefilling) < self.max_batch:
            rid = s.queue[0]
            need = int(s.prompt[rid] + s.left[rid]) + BLOCK_TOKENS // 2
            if committed + need + self.watermark > self.capacity:
                break                              # admitted only when its whole context is sure to fit
            committed += need
            take = min(int(s.prompt[rid]), room)
            s.queue.popleft()
            s.prefilling.append([rid, int(s.prompt[rid]), 0])
            chunks.append((rid, take, 0))
            room -= take
            free -= take + BLOCK_TOKENS // 2
        return chunks

    def _iteration(self, s: _State, t: float, chunks: list[tuple[int, int, int]], out: Outcome,
                   req: Requests) -> float:
        x = s.x
        context = s.context(x)
        prefill = sum(c for _, c, _ in chunks)
        work = sum(c * (p + (c + 1) / 2) for _, c, p in chunks)
        entries = list(s.prefilling)[:len(chunks)]           # the chunks are the first prefills, in order
        finishing = sum(1 for (_, c, _), e in zip(chunks, entries) if c >= e[1])
        it = Iteration(s.n_dec, context, prefill, work, s.n_dec + finishing)
        dt = self.cost.seconds(it)
        out.trace.append((t, dt, 1, s.n_dec, prefill, context, work))
        t += dt
        s.x += 1
        for (_, c, _), entry in zip(chunks, entries):
            entry[1] -= c
            entry[2] += c
            s.kv_prefill += c
        while s.prefilling and s.prefilling[0][1] <= 0:    # finished prompts (in order) start decoding
            rid, _, prefix = s.prefilling.popleft()
            s.kv_prefill -= prefix
            if np.isnan(out.first[rid]):
                out.first[rid] = t
            s.start_decode(rid, prefix, x)
        s.finish_until(x, t, out)
        return t

    # ---- runs of identical decode iterations -------------------------------------------------------------

    def _can_skip(self, s: _State) -> bool:
        """Only decoding, nothing waiting could be admitted: the next iterations differ only in context."""
        return bool(s.decoding) and not s.prefilling and s.n_dec > 0

    def _decode_run(self, s: _State, t: float, out: Outcome, req: Requests) -> float:
        """As many decode-only iterations as pass before the next event, in one step."""
        x, n = s.x, s.n_dec
        k = s.next_finish() - x + 1                                       # the first to finish is done
        grow = (self.capacity - s.kv_used()) // n                         # before the cache is full
        k = max(1, min(k, grow))
        fixed = self.cost.fixed(n, n)
        b = self.cost.per_context
        c0 = s.context(x)
        if s.queue == deque() and s.next_arrival < len(req):              # an arrival would be admitted
            k = min(k, _iterations_before(float(req.arrival[s.next_arrival]) - t, fixed + b * c0, b * n))
        k = max(1, k)
        seconds = k * (fixed + b * c0) + b * n * k * (k - 1) / 2
        out.trace.append((t, seconds, k, n, 0, c0 + n * (k - 1) / 2, 0.0))
        t += seconds
        s.x += k
        s.finish_until(s.x - 1, t, out)
        return t


def _iterations_before(wait: float, first: float, step: float) -> int:
    """Iterations that start before `wait` seconds pass, the first lasting `first` and each `step` longer:
    the smallest k with k first + step k (k - 1) / 2 >= wait (at least 1)."""
    if wait <= 0:
        return 1
    if step <= 0:
        return max(1, math.ceil(wait / first))
    a, b = step / 2, first - step / 2
    return max(1, math.ceil((-b + math.sqrt(b * b + 4 * a * wait)) / (2 * a)))


class _State:
    """The scheduler's queues and the running requests' counters."""

    def __init__(self, req: Requests) -> None:
        self.prompt = req.prompt.astype(np.int64).copy()        # tokens to prefill (grows when preempted)
        self.left = req.output.astype(np.int64).copy()          # tokens still to generate
        self.queue: deque[int] = deque()
        self.prefilling: deque[list[int]] = deque()             # [request, tokens left, prefix done]
        self.next_arrival = 0
        self.x = 0                                              # iterations run
        self.decoding: list[tuple[int, int]] = []               # heap of (last iteration, request)
        self.entered: dict[int, tuple[int, int, int]] = {}      # request -> (first iteration, context, last)
        self.order: list[int] = []                              # decoding requests, oldest first
        self.finished_now: list[int] = []                       # one-token requests done by their prefill
        self.n_dec = 0
        self.offset = 0                                         # sum of (context at entry - entry iteration)
        self.kv_prefill = 0                                     # tokens of prompts being prefilled
        self.last_sum = 0                                       # sum of the decoding requests' last steps

    def context(self, x: int) -> float:
        """The decoding requests' contexts, summed, at iteration x."""
        return float(self.offset + self.n_dec * x)

    def kv_used(self) -> int:
        """Cache tokens in use: contexts, prompts prefilled so far, half a block per request."""
        requests = self.n_dec + len(self.prefilling)
        return int(self.context(self.x)) + self.kv_prefill + requests * BLOCK_TOKENS // 2

    def committed(self) -> int:
        """Cache tokens the running requests will hold at their end: their contexts and every token still
        to come (decoding: until their last iteration; prefilling: the rest of the prompt and the output)."""
        growth = self.last_sum - self.n_dec * (self.x - 1)
        pending = sum(int(left + self.left[rid]) for rid, left, _ in self.prefilling)
        return self.kv_used() + growth + pending

    def start_decode(self, rid: int, context: int, x: int) -> None:
        """After the prompt's last chunk in iteration x (which gives a token): decode from x + 1."""
        self.left[rid] -= 1
        if self.left[rid] <= 0:
            self.finished_now.append(rid)
            return
        entry = x + 1
        last = entry + int(self.left[rid]) - 1
        self.entered[rid] = (entry, context, last)
        self.last_sum += last
        self.offset += context - entry
        self.n_dec += 1
        self.order.append(rid)
        heapq.heappush(self.decoding, (last, rid))

    def _live(self, last: int, rid: int) -> bool:
        found = self.entered.get(rid)
        return found is not None and found[2] == last

    def next_finish(self) -> int:
        """The iteration of the next decoding request's last token."""
        while self.decoding and not self._live(*self.decoding[0]):
            heapq.heappop(self.decoding)
        return self.decoding[0][0] if self.decoding else self.x

    def finish_until(self, x: int, t: float, out: Outcome) -> None:
        """Requests whose last token came in an iteration up to x: done at t."""
        for rid in self.finished_now:
            out.done[rid] = t
        self.finished_now = []
        while self.decoding and self.decoding[0][0] <= x:
            last, rid = heapq.heappop(self.decoding)
            if self._live(last, rid):
                self._leave(rid)
                out.done[rid] = t

    def _leave(self, rid: int) -> tuple[int, int, int]:
        found = self.entered.pop(rid)
        self.last_sum -= found[2]
        self.offset -= found[1] - found[0]
        self.n_dec -= 1
        return found

    def preempt_newest(self) -> None:
        """The newest decoding request gives up its cache; it is prefilled again from its prompt and the
        tokens it generated, ahead of every waiting request."""
        while self.order and self.order[-1] not in self.entered:
            self.order.pop()
        rid = self.order.pop()
        entry, context, _ = self._leave(rid)
        self.left[rid] -= self.x - entry                            # the tokens it made since its entry
        self.prompt[rid] = context + (self.x - entry) + 1           # its context and the token in hand
        self.queue.appendleft(rid)
