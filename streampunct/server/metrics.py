"""The server's Prometheus metrics, served at ``/metrics`` in the text exposition format: what a
dashboard, an alert or an autoscaler reads. One registry per server (not the process-global one), so
that servers in one process (the clients' embedded ones, the tests) keep their own.

Counters count from the server's start; the gauges are read when scraped.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from ..scheduler import Load
from ..types import SAMPLE_RATE
from .allocator import heap

__all__ = ["Metrics", "CONTENT_TYPE_LATEST"]

ENDPOINTS = ("punct", "asr")
GUARDS = ("loop", "runaway")  # StreamingRecognizer's guards
GUARDED = "streampunct_recognition_guarded_passes"
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)
LAG_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.5, 1.0, 2.5, 5.0)


class Metrics:
    """Every metric of one server; the server and its sessions call the ``observe``/``count``
    methods as things happen. ``sessions``: the open ones (the server's, read when scraped);
    ``punctuation``, ``recognition``: the workers' loads (a server without speech recognition: None)."""

    def __init__(self, sessions: Mapping[str, object], punctuation: Load, recognition: Load | None):
        r = self.registry = CollectorRegistry(auto_describe=True)
        streams = Gauge("streampunct_open_streams", "Streams open now, on both endpoints", registry=r)
        streams.set_function(lambda: len(sessions))
        self.sessions = Counter("streampunct_sessions", "Sessions opened", ["endpoint"], registry=r)
        self.failed = Counter(
            "streampunct_failed_sessions", "Sessions the server failed on (closed with internal or unavailable)", ["endpoint"],
            registry=r,
        )  # fmt: skip
        self.words = Counter("streampunct_final_words", "Words whose punctuation became final", registry=r)
        self.batch = Histogram(
            "streampunct_batch_size", "Jobs in each batch the punctuation worker ran", buckets=BATCH_BUCKETS,
            registry=r,
        )  # fmt: skip
        self.lag = Histogram(
            "streampunct_decision_lag_seconds",
            "From a call reaching the punctuation batcher to its events (waiting and computing)",
            buckets=LAG_BUCKETS,
            registry=r,
        )
        workers = [("punctuation", punctuation, "words"), ("recognition", recognition, "audio seconds")]
        for name, load, unit in workers:
            if load is None:
                continue
            busy = Gauge(
                f"streampunct_{name}_load", f"Share of the last 5 s the {name} worker computed", registry=r
            )
            busy.set_function(load.busy)
            done = Gauge(
                f"streampunct_{name}_capacity", f"{unit.capitalize()} the {name} worker gets done a second of computing",
                registry=r,
            )  # fmt: skip
            done.set_function(_or_nan(load.capacity))
        if recognition is not None:
            ratio = Gauge(
                "streampunct_recognition_compute_ratio", "Recognition seconds per second of audio, lately (all streams)",
                registry=r,
            )  # fmt: skip
            ratio.set_function(_or_nan(recognition.seconds_per_unit))
            buffer = Gauge(
                "streampunct_recognition_buffer_seconds", "The longest audio buffer a /v1/asr stream re-transcribes",
                registry=r,
            )  # fmt: skip
            buffer.set_function(lambda: max(map(_buffer_s, list(sessions.values())), default=0.0))
        memory = Gauge(
            "streampunct_malloc_bytes", "The C heap: bytes in use, free inside it, mmapped apart (glibc)", ["kind"],
            registry=r,
        )  # fmt: skip
        for kind in ("in_use", "free", "mapped"):
            memory.labels(kind).set_function(functools.partial(_heap_bytes, kind))
        self.guarded = Counter(GUARDED, "Recognition passes cut by a guard", ["guard"], registry=r)
        self.skipped = Counter(
            "streampunct_recognition_skipped_seconds",
            "Audio skipped because recognition fell behind",
            registry=r,
        )
        for endpoint in ENDPOINTS:  # every series present from the start, at 0
            self.sessions.labels(endpoint)
            self.failed.labels(endpoint)
        for guard in GUARDS:
            self.guarded.labels(guard)

    def observe_batch(self, size: int, finals: int, lags: Sequence[float]) -> None:
        """A batch of ``size`` jobs ran, made ``finals`` words final; each job's wait and compute."""
        self.batch.observe(size)
        self.words.inc(finals)
        for lag in lags:
            self.lag.observe(lag)

    def guarded_passes(self) -> dict[str, int]:
        """The passes each guard has cut, those it has."""
        counts = {g: self.registry.get_sample_value(GUARDED + "_total", {"guard": g}) for g in GUARDS}
        return {g: int(n) for g, n in counts.items() if n}

    def render(self) -> bytes:
        return generate_latest(self.registry)


def _buffer_s(session: object) -> float:
    """Seconds of audio in a /v1/asr session's recogniser buffer (0 for any other session)."""
    pipeline = getattr(session, "pipeline", None)
    return 0.0 if pipeline is None else len(pipeline.recognizer.audio) / SAMPLE_RATE


def _heap_bytes(kind: str) -> float:
    return float((heap() or {}).get(kind, math.nan))


def _or_nan(read: Callable[[], float | None]) -> Callable[[], float]:
    """A gauge's reading: NaN while there is none (before the worker has computed)."""
    return lambda: v if (v := read()) is not None else float("nan")
