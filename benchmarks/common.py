"""Shared by the benchmarks, and by the tests that run them or a server: not a benchmark itself.
The benchmarks import it, the package, benchmarks/lib/ and third-party packages, never one another
or the tests. Importing it needs no dev extras: jsonschema is imported only where a reply is validated.

- the machine, timing, and writing results (stamped JSON under benchmarks/results/, tables into docs);
- a real ``streampunct serve``: started, stopped, its memory (espeak-ng speech for /v1/asr: lib/speech.py);
- talking to a server as the protocol says: each reply validated against its JSON Schema
  (docs/schema/), a short script played on /v1/punct, the final labels read off the replies.

Audio clips and the recordings of ``python -m benchmarks.e2e record`` are in benchmarks/lib/recordings.py;
the fuzz's generator, oracle and client in benchmarks/lib/fuzz_*.py.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from websockets.asyncio.client import connect

if TYPE_CHECKING:
    from streampunct import Punctuator

ROOT = Path(__file__).parent.parent
RESULTS = Path(__file__).parent / "results"
README = ROOT / "README.md"
PAGES = tuple(
    README.parent / p for p in ("README.md", "docs/results.md", "docs/latency.md")
)  # the tables' pages


def machine() -> dict[str, object]:
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info: dict[str, object] = {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
    }
    return info


def percentile(xs: Iterable[float], q: float) -> float:
    """The q-th percentile (0-100) of xs, nearest rank."""
    s = sorted(xs)
    return s[min(len(s) - 1, int(q / 100 * len(s)))]


def time_each(call: Callable[[object], object], items: Iterable[object]) -> list[float]:
    """Seconds taken by ``call(item)`` for each item, one call at a time."""
    times = []
    for item in items:
        t0 = time.perf_counter()
        call(item)
        times.append(time.perf_counter() - t0)
    return times


def time_pushes(p: Punctuator, words: list[str], k: int, engine: str = "masked") -> list[float]:
    """Seconds per push of one stream fed a word at a time."""
    s = p.stream(lookahead=k, engine=engine)
    times = time_each(lambda w: s.push([w]), words)
    s.finish()
    return times


def device_suffix(device: object) -> str:
    """ "" on the CPU, "_cuda" on a GPU: results on each live side by side."""
    kind = str(device).split(":")[0]
    return "" if kind == "cpu" else f"_{kind}"


def command(argv: Sequence[str] | None = None) -> str:
    """How this run was started: ``python -m benchmarks.NAME`` and its arguments (``argv``, else the
    command line's), quoted as a shell reads them."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    name = str(getattr(spec, "name", "") or "")
    script = Path(sys.argv[0]) if sys.argv and sys.argv[0] else Path()
    if not name.startswith("benchmarks.") and script.suffix == ".py" and script.parent.name == "benchmarks":
        name = f"benchmarks.{script.stem}"
    head = ["python", "-m", name] if name.startswith("benchmarks.") else ["python", str(script)]
    return shlex.join([*head, *(sys.argv[1:] if argv is None else argv)])


def commit() -> str | None:
    """The repository's HEAD, with "-dirty" where tracked files differ from it; None without git."""
    try:
        git = ["git", "--no-optional-locks", "-C", str(ROOT)]
        head, changed = (
            subprocess.run([*git, *args], capture_output=True, text=True, check=True).stdout.strip()
            for args in (["rev-parse", "HEAD"], ["status", "--porcelain", "--untracked-files=no"])
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("-dirty" if changed else "")


def stamped(payload: dict[str, object], argv: Sequence[str] | None = None) -> dict[str, object]:
    """The payload after what made it: ``command`` (:func:`command`), ``commit`` (:func:`commit`),
    ``date`` (now, UTC, ISO 8601) and ``machine`` (the payload's own, measured by the run, else
    :func:`machine`). The stamps replace keys of those names in the payload."""
    stamp = {
        "command": command(argv),
        "commit": commit(),
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": payload.get("machine") or machine(),
    }
    return {**stamp, **{k: v for k, v in payload.items() if k not in stamp}}


def write_result(path: Path, payload: dict[str, object], argv: Sequence[str] | None = None) -> Path:
    """``payload``, stamped (:func:`stamped`), as the whole of the JSON file ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(stamped(payload, argv), indent=2) + "\n")
    return path


def write_json(
    name: str | Path,
    payload: dict[str, object],
    setting: str | None = None,
    *,
    folder: Path | None = None,
    argv: Sequence[str] | None = None,
) -> Path:
    """The benchmark's one current result file, ``name`` under ``folder`` (benchmarks/results/; a
    path of its own stays one), stamped (:func:`stamped`; ``argv``: the arguments the command was
    given, where not the command line's). A run of another ``setting`` than the default (an
    engine, int8) goes into the file's ``settings`` under that name, stamped there; a default run
    keeps them."""
    path = (RESULTS if folder is None else folder) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    old = json.loads(path.read_text()) if path.is_file() else {}
    payload = stamped(payload, argv)
    if setting is None:
        data = {**payload, "settings": old["settings"]} if "settings" in old else payload
    else:
        data = {**old, "settings": {**old.get("settings", {}), setting: payload}}
    path.write_text(json.dumps(data, indent=2) + "\n")
    return path


def update_readme(section: str, markdown: str) -> None:
    """Replace the text between <!-- section:start --> and <!-- section:end --> in the README or in
    docs/results.md, wherever the markers are."""
    pattern = re.compile(rf"(<!-- {section}:start -->\n).*?(<!-- {section}:end -->)", re.S)
    for page in PAGES:
        text = page.read_text()
        if pattern.search(text):
            page.write_text(pattern.sub(lambda m: m.group(1) + markdown.rstrip() + "\n" + m.group(2), text))
            return
    raise SystemExit(f"no <!-- {section}:start/end --> markers in {', '.join(p.name for p in PAGES)}")


# --- the server ---------------------------------------------------------------------------------


@dataclass
class Server:
    """A ``streampunct serve`` process (:func:`start_server`); its log (stderr) in a file."""

    proc: subprocess.Popen[str]
    url: str
    log: Path
    ray: bool = False  # `streampunct serve-ray`: ``proc`` is Ray's driver, the replicas are other processes

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> int | None:
        """SIGTERM, as an operator would; the exit status (None if it had to be killed)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None

    def failures_logged(self) -> list[str]:
        """The server's own ``session_failed`` log lines."""
        try:
            lines = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return []
        return [line for line in lines if '"session_failed"' in line]


def free_port() -> int:
    """A port of 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(
    *args: str,
    log: Path | None = None,
    env: dict[str, str] | None = None,
    ray: int | None = None,
    cpus: str | None = None,
) -> Server:
    """A `streampunct serve` on a free port of 127.0.0.1; its log (stderr) goes to ``log``. ``ray``:
    `streampunct serve-ray` instead, with that many session replicas and one encoder on a local Ray
    (its ``pid`` is the driver's, not the replicas'). ``cpus``: the cores it may run on (taskset's
    list, "0" or "0,1"; it makes a batching lane a core it has)."""
    if log is None:
        log = Path(tempfile.mkstemp(prefix="streampunct-soak-", suffix=".log")[1])
    # the soak runs speech faster than real time, at full speed by design: admission by load
    # (503 busy) would refuse its sessions; server_load.py's overload section measures that
    command = ["streampunct.server.app", "--port", "0", "--max-load", "off"]
    if ray is not None:
        command = ["streampunct.cli", "serve-ray", "--port", str(free_port()), "--session-replicas", str(ray)]
    with log.open("w") as err:
        proc = subprocess.Popen(
            [
                *(["taskset", "-c", cpus] if cpus else []),
                sys.executable,
                "-m",
                *command,
                "--host",
                "127.0.0.1",
                *args,
            ],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            cwd=ROOT,
            env={**os.environ, **(env or {})},
        )
    assert proc.stdout is not None
    line = "-"
    while line and "serving on" not in line:  # Ray may print before it
        line = proc.stdout.readline()
    if "serving on" not in line:
        proc.kill()
        proc.wait()
        raise RuntimeError(f"the server did not start: {line!r}\n{log.read_text()[-2000:]}")
    return Server(proc, line.split()[-1], log, ray is not None)


def rss_mb(pid: int) -> float | None:
    """Resident memory of a process (VmRSS), MB; None once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


# --- talking to a server ---------------------------------------------------------------------------

SCHEMAS = ROOT / "docs" / "schema"
WORDS = "so what did you do last summer we went to the coast and it rained every day did n't it".split()


def validate(msg: dict) -> None:
    """Every message the server sends fits its JSON Schema in docs/schema/server/."""
    import jsonschema  # a dev extra: here, so that importing this module needs none

    schema = json.loads((SCHEMAS / "server" / f"{msg['type']}.json").read_text())
    jsonschema.validate(msg, schema)


def spawn_server(*args: str) -> tuple[subprocess.Popen, str]:
    """A ``streampunct serve`` on a free port, on the CPU with one thread; its log (stderr) a pipe.
    The process and its URL."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "streampunct.server.app", "--port", "0", "--device", "cpu", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "serving on" not in line:
        proc.kill()
        raise RuntimeError(f"server did not start: {line!r} {proc.stderr.read() if proc.stderr else ''}")
    return proc, line.split()[-1]


async def talk(url: str, messages: list, lookahead: int = 2, **config: Any) -> list[dict]:
    """Send config (``config``: more of its keys) then messages (dicts as JSON, bytes as binary);
    collect replies until end."""
    replies = []
    async with connect(url + "/v1/punct") as ws:
        settings = {"type": "config", "version": 1, "lookahead": lookahead, "max_delay_ms": None}
        await ws.send(json.dumps({**settings, **config}))
        replies.append(json.loads(await ws.recv()))
        for m in messages:
            await ws.send(m if isinstance(m, bytes | str) else json.dumps(m))
        await ws.send(json.dumps({"type": "end"}))
        async for raw in ws:
            replies.append(json.loads(raw))
    for r in replies:
        validate(r)
    return replies


def finals(replies: list[dict]) -> list[str]:
    """Each word's final label, in word order (a word made final twice fails)."""
    out = {}
    for r in replies:
        for e in r.get("events", []):
            if e["final"]:
                assert e["index"] not in out
                out[e["index"]] = e["label"]
    return [out[i] for i in range(len(out))]
