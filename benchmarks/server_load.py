"""Load and faults on loopback: a real `streampunct serve`, many live streams, and clients that misbehave.

    python -m benchmarks.server_load                                  # everything (about 15 minutes)
    python -m benchmarks.server_load --sections punct --streams 5,10 --seconds 15
    python -m benchmarks.server_load --quick                          # a tiny version of all (< 30 s)
    python -m benchmarks.server_load --docs-only                      # the docs tables from the results

Each section runs against fresh servers (`benchmarks/common.py`'s ``start_server``: `streampunct
serve` on a free loopback port, its log in a temporary file) with their default limits (200 words
a second per /v1/punct connection, 10x real time per /v1/asr connection, a 10 s shutdown grace),
except the number of streams, raised above the largest N tried. The text is IWSLT dev2012
(``--data``), or a few built-in sentences where it is missing.

``punct``: N concurrent /v1/punct streams (lookahead 2, ``max_delay_ms`` 1000), each sending one
word every 1/3 s, starts staggered over the first 1/3 s; word j spans j/3 .. j/3 + 0.25 s on the
stream's clock and is sent, with ``now`` at its end, at t0 + offset + j/3. After ``--seconds`` each
stream sends ``end`` at its next slot. A word's latency is the time from the moment it was sent to
the moment its final event arrived. Every word must get exactly one final event (``lost`` counts
those with none or several: must be 0) and every stream its ``end`` (with the number of words
sent). A run passes when, besides, its p99 latency is at most ``--bound-s`` (1.5 s: the lookahead's
0.67 s plus margin). N goes 5, 10, 20, 40, ... up to the first failure (or ``--max-streams``),
then bisects between the last pass and the first failure down to 10 % of N; ``--streams 10,20``
runs just those. One short warm-up stream comes first; the server's RSS is read after each run,
and the client's own event-loop lag is kept (a busy client would inflate every latency).

``asr``: N concurrent /v1/asr streams of espeak-ng speech (``--asr-seconds``, the text read as in
the soak, cached there; skipped with a note without espeak-ng or a recogniser) sent as the mic
client sends it, 16 kHz PCM16 in 0.25 s chunks at real time (``streampunct.clients.file.stream_file`` at speed
1: chunk i at t0 + i * 0.25 s), starts staggered over 0.5 s, after a 5 s warm-up stream.
N = 1, 2, 3, ... until a stream gets a ``lag`` message (recognition fell behind and skipped audio)
or a committed word lacks exactly one final event (or ``--asr-max-streams``). A committed word
that ends at e seconds of audio is due at t0 + e: its latency is the arrival of its final event on
that clock minus e.

``faults`` (a and c on one server; b on fresh ones):

a. killed clients: ``--kills`` times a /v1/punct stream takes 50 words (one a message), and once
   the first events came its connection is cut without a close frame (``transport.abort()``);
   then once a /v1/asr stream mid-audio (once its first words came; not in ``--quick``). After
   each, ``/health`` must report 0 streams (within 15 s), the server's RSS must not grow more than
   ``RSS_SLACK_MB`` from the 5th kill (the first in ``--quick``) to the last, and a stream
   afterwards must work.
b. SIGTERM mid-stream: ``--sigterm-streams`` /v1/punct streams at 3 words a second for
   ``--sigterm-seconds``; they stop sending, and the server gets SIGTERM. Every word sent must get
   exactly one final event, every stream ``end`` with ``"reason": "server shutting down"`` (and a
   1001 close), the server must exit with status 0. The time from the signal to its exit is kept.
   b2 (not in ``--quick``): the same, but the clients keep talking after the signal, as live
   recognisers do, until the server ends their streams (at most ``--keep-talking-cap-s``, then
   they end them themselves): the server must end every stream itself and exit within its
   shutdown bound (twice the 10 s grace), every word sent before the signal final.
c. stalled reader: a client with a small socket receive buffer and no compression sends its
   config, reads ``ready``, then sends words at 90 % of the server's rate limit (20 a message)
   for ``--stall-seconds`` and never reads again. Beside it a neighbour stream runs at 3 words a
   second; the same neighbour ran alone just before. The server's RSS (and the kernel's queues on
   that connection, /proc/net/tcp) is sampled every ``--rss-every-s``; it must level off (at most
   ``RSS_SLACK_MB`` of growth over the second half; judged for stalls of 20 s or more). The
   neighbour's p99 latency is compared with its run alone; the words the server took from the
   stalled client come from its ``disconnect`` log line.

Writes benchmarks/results/server_load.json (``--quick``: server_load_quick.json), each section
with the machine it ran on and its command (sections not run are kept from the file); prints the
tables; ``--docs`` writes them into docs/protocol.md between ``<!-- server_load -->`` and
``<!-- /server_load -->``. Exits with status 1 when a word lacked exactly one final event, a stream
failed or a fault check failed (a latency bound missed, or lag at the last N, is a measurement,
not a failure).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.common import RESULTS, machine, write_json, write_result
from benchmarks.common import command as run_command
from benchmarks.lib.load_faults import section_faults
from benchmarks.lib.load_overload import section_overload
from benchmarks.lib.load_report import DOCS, MARKERS, markdown, write_docs
from benchmarks.lib.load_sections import Servers, section_asr, section_punct
from benchmarks.lib.load_streams import load_text
from streampunct.errors import StreamPunctError

ROOT = Path(__file__).parent.parent


# --- main ----------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    default_data = os.environ.get("STREAMPUNCT_DATA", str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--sections", default="punct,asr,faults", help="any of punct, asr, faults (default: all)")
    ap.add_argument("--quick", action="store_true", help="a tiny version of everything, under 30 s")
    ap.add_argument("--data", type=Path, default=Path(default_data), help="a folder laid out as shared/data")
    ap.add_argument("--device", default="cpu", help="the server's device (cpu, cuda)")
    ap.add_argument("--model", default=None, help="punctuation model: default, base or a checkpoint folder")
    ap.add_argument("--asr-model", default=None, help="tiny.en (the server's default), base or a folder")
    g = ap.add_argument_group("punct")
    g.add_argument(
        "--streams", default=None, help="the Ns to run, e.g. 10,20 (default: 5, 10, 20, ... then bisect)"
    )
    g.add_argument(
        "--max-streams", type=int, default=320, help="where the doubling stops (default %(default)s)"
    )
    g.add_argument("--seconds", type=float, default=30.0, help="per run (default %(default)s)")
    g.add_argument("--bound-s", type=float, default=1.5, help="p99 latency bound (default %(default)s)")
    g = ap.add_argument_group("asr")
    g.add_argument("--asr-seconds", type=float, default=60.0, help="speech per stream (default %(default)s)")
    g.add_argument("--asr-max-streams", type=int, default=12, help="the most N tried (default %(default)s)")
    g = ap.add_argument_group("overload (issue 48; not in the default sections)")
    g.add_argument("--overload-seconds", type=float, default=60.0, help="(default %(default)s)")
    g.add_argument(
        "--overload-factor", type=float, default=3.0, help="x the measured capacity (default %(default)s)"
    )
    g.add_argument("--overload-senders", type=int, default=8, help="(default %(default)s)")
    g.add_argument(
        "--overload-end-wait-s", type=float, default=900.0, help="for each end (default %(default)s)"
    )
    g = ap.add_argument_group("faults")
    g.add_argument("--kills", type=int, default=20, help="connections cut (default %(default)s)")
    g.add_argument("--sigterm-streams", type=int, default=10, help="(default %(default)s)")
    g.add_argument(
        "--sigterm-seconds", type=float, default=10.0, help="before the signal (default %(default)s)"
    )
    g.add_argument(
        "--keep-talking-cap-s",
        type=float,
        default=45.0,
        help="SIGTERM with clients that keep talking: when they stop (default %(default)s)",
    )
    g.add_argument("--stall-seconds", type=float, default=30.0, help="(default %(default)s)")
    g.add_argument(
        "--rss-every-s", type=float, default=5.0, help="RSS samples in the stall (default %(default)s)"
    )
    ap.add_argument(
        "--ray", type=int, default=None, metavar="N",
        help="punct section on `streampunct serve-ray`: N session replicas, one encoder (settings.ray)",
    )  # fmt: skip
    ap.add_argument("--out", type=Path, default=None, help="default: benchmarks/results/server_load.json")
    ap.add_argument("--docs", action="store_true", help="write the tables into docs/protocol.md's markers")
    ap.add_argument("--docs-only", action="store_true", help="only that, from the results file; run nothing")
    args = ap.parse_args(argv)
    if args.quick:
        args.sections = "punct,faults"
        args.streams = args.streams or "2"
        args.seconds, args.kills = 3.0, 3
        args.sigterm_streams, args.sigterm_seconds = 2, 2.0
        args.stall_seconds, args.rss_every_s = 3.0, 1.0
    args.stall_alone_seconds = 2.0 if args.quick else args.stall_seconds
    args.out = args.out or RESULTS / ("server_load_quick.json" if args.quick else "server_load.json")
    args.punct_model_args = ["--model", args.model] if args.model else []
    args.model_args = args.punct_model_args + (["--asr-model", args.asr_model] if args.asr_model else [])
    unknown = set(args.sections.split(",")) - {"punct", "asr", "faults", "overload", ""}
    if unknown:
        ap.error(f"unknown sections {', '.join(sorted(unknown))} (punct, asr, faults, overload)")
    return args


def asr_available(args: argparse.Namespace) -> None:
    """Whether /v1/asr can be measured here; the note if not."""
    import shutil

    args.asr_ok, args.asr_note = True, None
    if shutil.which("espeak-ng") is None:
        args.asr_ok, args.asr_note = False, "espeak-ng is not installed"
        return
    try:
        from streampunct.speech import resolve_asr_model

        resolve_asr_model(args.asr_model)
        import faster_whisper  # noqa: F401
    except (ImportError, StreamPunctError) as e:
        args.asr_ok, args.asr_note = False, f"no speech recogniser: {e}"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    previous: dict[str, Any] = {}
    if args.out.is_file():
        previous = json.loads(args.out.read_text())
    if args.docs_only:
        if not previous:
            raise SystemExit(f"no results in {args.out}")
        print(markdown(previous))
        if not write_docs(previous):
            print(f"no {' ... '.join(MARKERS)} markers in {DOCS}: nothing written")
        return 0
    asr_available(args)
    words, labels, source = load_text(args.data)
    command = run_command(argv)
    info = machine()
    run_at = {"command": command, "machine": info, "device": args.device, "text": source}
    wanted = [s for s in ("punct", "asr", "faults", "overload") if s in args.sections.split(",")]
    t0 = time.perf_counter()

    async def run_all() -> dict[str, Any]:
        done: dict[str, Any] = {}
        servers = Servers(args)
        if args.quick:  # every server at once: they load while the others work
            servers.start(*wanted, *(["sigterm"] if "faults" in wanted else []))
        try:
            for name in wanted:
                t = time.perf_counter()
                if name == "punct":
                    figures = await section_punct(args, servers, words)
                elif name == "asr":
                    figures = await section_asr(args, servers, words, labels)
                elif name == "overload":
                    figures = await section_overload(args, words)
                else:
                    figures = await section_faults(args, servers, words, labels)
                key = "punct_ray" if name == "punct" and args.ray else name  # beside the plain server's
                done[key] = {**run_at, "wall_s": round(time.perf_counter() - t, 1), **figures}
        finally:
            await servers.close()
        return done

    sections = asyncio.run(run_all())
    ok = all(
        s.get("sound", True) and s.get("passed", True) if name == "faults" else s.get("sound", True)
        for name, s in sections.items()
    )
    payload = {
        "machine": info,
        "quick": args.quick,
        "passed": ok,
        "wall_s": round(time.perf_counter() - t0, 1),
        "sections": {**previous.get("sections", {}), **sections},
    }
    if args.out.parent.resolve() == RESULTS.resolve():
        path = write_json(args.out.name, payload, argv=argv)
    else:
        path = write_result(args.out, payload, argv)
    print()
    print(markdown({"sections": sections}))
    if args.docs and not write_docs(payload):
        print(f"no {' ... '.join(MARKERS)} markers in {DOCS}: nothing written")
    print(f"{'passed' if ok else 'FAILED'} in {payload['wall_s']:.0f} s; wrote {path}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
