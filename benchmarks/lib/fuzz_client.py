"""The fuzz's client and server: a script played on one connection with every reply checked
(``run_script``, its ``Report``), the neighbour's fixed script, the check of the server's log
(``log_problems``) and the server the fuzz runs against (``FuzzServer``, ``warm_up``)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import signal
import subprocess
import tempfile
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed
from websockets.protocol import State

from benchmarks.common import WORDS, finals, spawn_server, talk
from benchmarks.lib.fuzz_messages import (
    ANSWER_TIMEOUT_S,
    END,
    MAX_FRAME,
    PROBE,
    PROBE_TYPE,
    REVISE,
    Hostile,
    Script,
)
from benchmarks.lib.fuzz_oracle import Stream, expected, frame_fault, schema_fault, server_parse
from streampunct.types import SAMPLE_RATE

# --- the fuzz: running a script ----------------------------------------------------------------------


@dataclass
class Report:
    """What one connection (or many, added up) sent and got; ``problems``: each property broken."""

    messages: Counter[str] = field(default_factory=Counter)  # hostile messages sent, by kind
    replies: Counter[str] = field(default_factory=Counter)  # by type; errors by code (probes' apart)
    probe_replies: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)
    closes: Counter[str] = field(default_factory=Counter)
    big_replies: Counter[str] = field(default_factory=Counter)  # over 1 MiB (the server's own limit), by type
    largest_reply: int = 0  # bytes
    probes: int = 0
    connections: int = 0
    problems: list[str] = field(default_factory=list)

    def add(self, other: Report) -> None:
        for name in ("messages", "replies", "probe_replies", "outcomes", "closes", "big_replies"):
            getattr(self, name).update(getattr(other, name))
        self.largest_reply = max(self.largest_reply, other.largest_reply)
        self.probes += other.probes
        self.connections += other.connections
        self.problems += other.problems


async def _send(ws: ClientConnection, h: Hostile) -> None:
    if h.frame == "raw":
        await ws.send(h.payload, text=True)
    else:
        await ws.send(h.payload)


async def _answers(ws: ClientConnection, timeout: float) -> tuple[list[str | bytes], str | None]:
    """Replies up to the probe's answer; the close code when the connection closes first."""
    out: list[str | bytes] = []
    try:
        while True:
            raw = await asyncio.wait_for(ws.recv(), timeout)
            out.append(raw)
            if isinstance(raw, str) and f'"{PROBE_TYPE}' in raw and '"error"' in raw:
                return out, None
    except ConnectionClosed as e:
        return out, str(e.rcvd.code if e.rcvd else 1006)
    except TimeoutError:
        return out, "timeout"


def _check_reply(endpoint: str, msg: dict[str, Any], s: Stream, problems: list[str]) -> None:
    """Word order and counts: one final event per word, in order, with its text; end counts them."""
    kind = msg["type"]
    if kind in ("words", "caption", "lag") and endpoint != "asr":
        problems.append(f"order: {kind} message on /v1/{endpoint}")
    if kind == "words":
        for c in msg["committed"]:
            if c.get("index") != len(s.texts):
                problems.append(f"order: committed word index {c.get('index')}, expected {len(s.texts)}")
            s.texts.append(c["text"])
    elif kind == "events":
        for e in msg["events"]:
            if e["final"]:
                if e["index"] != s.n_final:
                    problems.append(f"order: final event for word {e['index']}, expected {s.n_final}")
                elif e["index"] >= len(s.texts) or e["word"] != s.texts[e["index"]]:
                    problems.append(f"order: final event {str(e)[:200]} for a word not sent")
                s.n_final = max(s.n_final, e["index"] + 1)
            elif not s.n_final <= e["index"] < len(s.texts):
                problems.append(f"order: provisional event for word {e['index']} ({s.n_final} final)")
    elif kind == "caption":
        if not 0 <= msg["first"] <= msg["last"] < len(s.texts):
            problems.append(f"order: caption of words {msg['first']}..{msg['last']}")
    elif kind == "end":
        if msg["words"] != len(s.texts) or s.n_final != len(s.texts):
            problems.append(f"order: end says {msg['words']} words; {len(s.texts)} sent, {s.n_final} final")
        if endpoint == "asr" and abs(msg.get("audio_seconds", -1) - s.samples / SAMPLE_RATE) > 2e-3:
            problems.append(
                f"order: end says {msg.get('audio_seconds')} s of audio, {s.samples / SAMPLE_RATE} sent"
            )
        s.ended = True


def _apply(endpoint: str, h: Hostile, s: Stream, refused: bool = False) -> None:
    """A message taken: the stream as the server now holds it. ``refused``: a revise the session
    took and the stream then refused (final words): the recogniser's clock it carries still counts."""
    if h.frame == "binary":
        s.samples += h.size // 2
        return
    msg = server_parse(str(h.payload))
    assert isinstance(msg, dict)
    words = msg.get("words") if msg["type"] in ("words", "revise") else []
    texts = [w if isinstance(w, str) else w["text"] for w in words]
    if msg["type"] in ("words", "revise", "tick"):  # a word's time: its end, else its start
        ends = [
            w.get("end") if w.get("end") is not None else w.get("start") for w in words if isinstance(w, dict)
        ]
        s.clock = max([s.clock, *(t for t in [msg.get("now"), *ends] if t is not None)])
    if refused:
        return
    if endpoint == "punct" and msg["type"] == "words":
        s.texts += texts
    elif endpoint == "punct" and msg["type"] == "revise":
        s.texts[msg["index"] :] = texts


async def run_script(url: str, script: Script, timeout: float = ANSWER_TIMEOUT_S) -> Report:
    """Play one script on one connection; every property broken is a line in ``report.problems``."""
    report, s, endpoint = Report(connections=1), Stream(), script.endpoint
    problems = report.problems
    try:
        async with connect(
            f"{url}/v1/{endpoint}", max_size=None, open_timeout=60, close_timeout=10, ping_interval=None
        ) as ws:
            messages = list(script.messages)
            while messages:
                h = messages.pop(0)
                if h.tail is not None:
                    revision = json.loads(str(h.payload))
                    revision["index"] = max(s.n_final, len(s.texts) - h.tail)
                    h = dataclasses.replace(h, payload=json.dumps(revision, ensure_ascii=False), tail=None)
                allowed = expected(endpoint, h, s)
                batch = [h]
                if allowed == {"end"}:  # the messages after it go at once, never answered; a frame
                    batch += messages  # the websocket refuses may close the connection before the end
                    allowed |= {frame_fault(m) for m in messages} - {None}
                    messages = []
                try:
                    for m in batch:
                        report.messages[m.kind] += 1
                        await _send(ws, m)
                    await ws.send(PROBE)
                    report.probes += 1
                except ConnectionClosed:
                    pass
                if script.hang_up and not messages:
                    ws.transport.abort()
                    report.closes["hang_up"] += 1
                    break
                raws, closed = await _answers(ws, timeout)
                replies = []
                for raw in raws:
                    size = len(raw.encode() if isinstance(raw, str) else raw)
                    report.largest_reply = max(report.largest_reply, size)
                    try:
                        reply = json.loads(raw)
                    except ValueError:
                        problems.append(f"schema: a reply that is not JSON: {raw[:200]!r}")
                        continue
                    fault = schema_fault(reply)
                    if fault:
                        problems.append(f"schema: {str(reply)[:300]}: {fault}")
                        continue
                    name = f"error:{reply['code']}" if reply["type"] == "error" else reply["type"]
                    if reply["type"] == "error" and f'"{PROBE_TYPE}"' in reply["message"]:
                        report.probe_replies[name] += 1
                        continue
                    report.replies[name] += 1
                    if size > MAX_FRAME:  # a client with websockets' default max_size would close (1009)
                        report.big_replies[name] += 1
                    replies.append(reply)
                errors = [r["code"] for r in replies if r["type"] == "error"]
                kinds = {r["type"] for r in replies}
                outcome = (
                    errors[0]
                    if errors
                    else "ready"
                    if "ready" in kinds
                    else "end"
                    if "end" in kinds
                    else f"close:{closed}"
                    if closed
                    else "ok"
                )
                report.outcomes[f"{h.kind}:{outcome}"] += 1
                if len(errors) > 1:
                    problems.append(f"expect: {h!r} got {len(errors)} errors {errors}")
                if "internal" in errors:
                    problems.append(f"internal: {h!r} got an internal error: {replies}")
                elif outcome not in allowed:
                    problems.append(f"expect: {h!r} got {outcome}, expected {sorted(allowed)}")
                if outcome == "ok" or (h.expect == (REVISE,) and outcome == "bad_input"):
                    _apply(endpoint, h, s, refused=outcome != "ok")
                for reply in replies:
                    if reply["type"] == "ready":
                        s.configured = True
                    else:
                        _check_reply(endpoint, reply, s, problems)
                if closed is not None:
                    report.closes[closed] += 1
                    if closed == "timeout":
                        problems.append(f"timeout: no answer to {h!r} within {timeout:g} s")
                    elif not (closed == "1000" and s.ended) and f"close:{closed}" not in allowed:
                        problems.append(f"close: {h!r} closed the connection with {closed}")
                    break
            else:
                if ws.state is not State.OPEN:
                    problems.append(f"close: the connection is {ws.state.name} after the script")
                report.closes["client"] += 1
    except (OSError, TimeoutError) as e:
        problems.append(f"connect: {type(e).__name__}: {e}")
    except Exception as e:  # the handshake refused, or the client failed: a problem, not a crash here
        problems.append(f"client: {type(e).__name__}: {e}")
    return report


# --- the fuzz: the neighbour and the server ------------------------------------------------------------

NEIGHBOUR = [{"type": "words", "words": WORDS[i : i + 3]} for i in range(0, len(WORDS), 3)]


async def neighbour(url: str) -> list[str]:
    """The neighbour's fixed script (lookahead 2, no time limit): its final labels."""
    return finals(await talk(url, NEIGHBOUR))


def log_problems(lines: list[str]) -> list[str]:
    """Log lines that tell of an unhandled exception (a traceback, a failed session or batch)."""
    bad = []
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            if line.strip():
                bad.append(line[:2000])
            continue
        failed = entry.get("event") in ("session_failed", "recognition_failed", "batch_job_failed")
        if "exc" in entry or failed or entry.get("level") in ("error", "critical"):
            bad.append(line[:4000])
    return bad


class FuzzServer:
    """A real ``streampunct serve`` process with these flags, and ``config`` (TOML text) as its
    ``--config`` file where given; its log (stderr) read by a thread as it comes."""

    def __init__(self, *args: str, config: str | None = None):
        with tempfile.TemporaryDirectory() as folder:  # read as the server starts
            if config is not None:
                path = Path(folder) / "fuzz.toml"
                path.write_text(config, encoding="utf-8")
                args += ("--config", str(path))
            self.proc, self.url = spawn_server(*args)
        self.log: list[str] = []
        self._seen = 0
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.log.append(line.rstrip("\n"))

    def alive(self) -> bool:
        return self.proc.poll() is None

    def new_log(self) -> list[str]:
        lines = self.log[self._seen :]
        self._seen += len(lines)
        return lines

    def stop(self) -> int | None:
        """SIGTERM; the exit status (None: it had to be killed)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                return None
        self._reader.join(timeout=10)
        return self.proc.returncode


async def warm_up(url: str) -> list[str]:
    """Load the speech model (the first /v1/asr stream) and run the neighbour alone: its labels."""
    async with connect(url + "/v1/asr") as ws:
        await ws.send(json.dumps({"type": "config"}))
        await ws.send(json.dumps(END))
        async for _ in ws:
            pass
    return await neighbour(url)
