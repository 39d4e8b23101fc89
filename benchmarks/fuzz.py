"""The fuzz: hostile scripts against one real server, a neighbour beside; its generator and oracle.

    python -m benchmarks.fuzz --messages 10000 --asr-messages 2000

The fuzz harness lives in benchmarks/lib/, once: the messages and the values they draw from
(``fuzz_messages``: ``Hostile``, ``Script``, ``SERVER_ARGS``, ``SERVER_CONFIG``), the generator
(hypothesis strategies for hostile /v1/punct and /v1/asr scripts: ``fuzz_punct.punct_scripts``,
``fuzz_audio.asr_scripts``), the oracle of what the protocol says each message must get
(``fuzz_oracle.expected``, docs/protocol.md), the client that plays a script and checks every reply
(``fuzz_client.run_script``, its ``Report``), the neighbour's fixed script, the check of the server's
log (``log_problems``) and the server the fuzz runs against (``FuzzServer``, ``warm_up``).
tests/test_fuzz.py imports them, runs a few dozen small scripts and says what each checks. Talking to a
server as the protocol says (``talk``, ``finals``, the schemas, ``spawn_server``) is
benchmarks/common.py's.

Run as a script, this is the fuzz's long profile. One ``streampunct serve`` process (rate limits off)
takes the generator's scripts, bigger than the suite's (words of up to 600 kB, messages of up to 1000
words, audio chunks of up to 2 s and stretches of speech of up to 4 s), on up to ``--concurrency``
connections at once, until ``--messages`` hostile messages have gone to /v1/punct and
``--asr-messages`` to /v1/asr (probes not counted). Each message is checked against the protocol as
in the suite (its reply fits the schema, its outcome is the documented one, words are final once
each, in order, the connection closes only with the documented code). Throughout, a neighbour stream
on its own connection runs a fixed script again and again: its final labels must be those it gets
alone. At the end the server gets SIGTERM and must exit 0; its log must hold no traceback.

Writes benchmarks/results/fuzz.json (see ``summary`` below); exits with status 1 when a property broke.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from benchmarks.common import machine, write_json
from benchmarks.lib.fuzz_audio import asr_scripts
from benchmarks.lib.fuzz_client import FuzzServer, Report, log_problems, neighbour, run_script, warm_up
from benchmarks.lib.fuzz_messages import SERVER_ARGS, SERVER_CONFIG, Script
from benchmarks.lib.fuzz_punct import punct_scripts

# --- the long profile (this script) ------------------------------------------------------------

EXAMPLES_A_RUN = 100  # hypothesis examples per run of the generator (each run starts afresh)
KEEP = 40  # problems kept in the results, with their scripts


class Fuzz:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self.server = FuzzServer(*SERVER_ARGS, config=SERVER_CONFIG)
        self.alone = self.call(warm_up(self.server.url))
        self.rss: dict[str, float] = {}
        self.rss["after_warm_up"] = self.rss_mb()
        self.examples = 0
        self.totals = {"punct": Report(), "asr": Report()}
        self.problems: list[dict[str, Any]] = []
        self.categories: Counter[str] = Counter()
        self.crashes: list[dict[str, Any]] = []
        self.log_lines: list[str] = []
        self.neighbour = {"runs": 0, "mismatches": 0, "failed": 0, "first_mismatch": None}
        self.stopping = False
        self.neighbour_task = asyncio.run_coroutine_threadsafe(self.neighbour_forever(), self.loop)

    def rss_mb(self) -> float:
        """The server's resident memory (MB), and its highest so far."""
        try:
            status = Path(f"/proc/{self.server.proc.pid}/status").read_text()
            rss = (
                int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS"))) / 1024
            )
        except (OSError, StopIteration):
            return 0.0
        self.rss["max"] = max(self.rss.get("max", 0.0), rss)
        return rss

    def call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    async def neighbour_forever(self) -> None:
        while not self.stopping:
            try:
                labels = await neighbour(self.server.url)
            except Exception as e:  # a crash shows here too; recorded, and the run goes on
                self.neighbour["failed"] += 1
                self.neighbour["first_failure"] = self.neighbour.get("first_failure") or repr(e)[:500]
                await asyncio.sleep(0.5)
                continue
            self.neighbour["runs"] += 1
            if labels != self.alone:
                self.neighbour["mismatches"] += 1
                self.neighbour["first_mismatch"] = self.neighbour["first_mismatch"] or labels

    def sent(self, endpoint: str) -> int:
        return sum(self.totals[endpoint].messages.values())

    def problem(self, category: str, text: str, scripts: list[Script]) -> None:
        self.categories[category] += 1
        if len(self.problems) < KEEP:
            self.problems.append(
                {"category": category, "problem": text[:2000], "scripts": repr(scripts)[:4000]}
            )

    def example(self, scripts: list[Script]) -> None:
        """Run the scripts at once, each on its own connection; record what broke."""

        async def all_of() -> list[Report]:
            return await asyncio.gather(*(run_script(self.server.url, s) for s in scripts))

        for script, report in zip(scripts, self.call(all_of())):
            self.totals[script.endpoint].add(report)
            for text in report.problems:
                self.problem(text.split(":", 1)[0], text, [script])
        self.examples += 1
        self.rss["end"] = self.rss_mb()
        lines = self.server.new_log()
        self.log_lines += log_problems(lines)
        for line in log_problems(lines):
            self.problem("log", line, scripts)
        if not self.server.alive():
            self.crashes.append({"exit": self.server.proc.returncode, "scripts": repr(scripts)[:4000]})
            self.problem("crash", f"the server exited {self.server.proc.returncode}", scripts)
            self.log_lines += log_problems(self.server.new_log())
            # a fresh one, for the rest of the run
            self.server = FuzzServer(*SERVER_ARGS, config=SERVER_CONFIG)
            self.call(warm_up(self.server.url))

    def run(self) -> None:
        args = self.args
        punct = punct_scripts(most=12, huge=600_000, many=1000)
        asr = asr_scripts(most=8, most_bytes=64_000, most_speech_s=4)
        while self.sent("punct") < args.messages or self.sent("asr") < args.asr_messages:
            wanted = [
                s
                for s, n, goal in (
                    (punct, self.sent("punct"), args.messages),
                    (asr, self.sent("asr"), args.asr_messages),
                )
                if n < goal
            ]

            @settings(
                max_examples=EXAMPLES_A_RUN,
                deadline=None,
                database=None,
                phases=[Phase.generate],
                suppress_health_check=list(HealthCheck),
            )
            @given(scripts=st.lists(st.one_of(wanted), min_size=1, max_size=args.concurrency))
            def batch(scripts: list[Script]) -> None:
                self.example(scripts)

            batch()
            print(
                f"{time.perf_counter() - self.t0:7.0f} s: punct {self.sent('punct')}, asr {self.sent('asr')} messages; "
                f"neighbour runs {self.neighbour['runs']}; problems {sum(self.categories.values())}",
                flush=True,
            )

    def finish(self) -> int | None:
        self.stopping = True
        self.neighbour_task.result(timeout=120)
        code = self.server.stop()
        lines = log_problems(self.server.new_log())
        self.log_lines += lines
        for line in lines:
            self.problem("log", line, [])
        return code

    def main(self) -> int:
        self.t0 = time.perf_counter()
        try:
            self.run()
        finally:
            exit_code = self.finish()
        wall = time.perf_counter() - self.t0
        endpoints = {}
        for name, r in self.totals.items():
            endpoints[name] = {
                "connections": r.connections,
                "messages": sum(r.messages.values()),
                "probes": r.probes,
                "messages_by_kind": dict(r.messages.most_common()),
                "replies": dict(r.replies.most_common()),
                "probe_replies": dict(r.probe_replies.most_common()),
                "outcomes": dict(sorted(r.outcomes.items())),
                "close_codes": dict(r.closes.most_common()),
                "replies_over_1_MiB": dict(r.big_replies.most_common()),
                "largest_reply_bytes": r.largest_reply,
            }
        unaffected = self.neighbour["mismatches"] == 0 and self.neighbour["failed"] == 0
        summary = {
            "benchmark": "fuzz",
            "server_args": list(SERVER_ARGS),
            "server_config": SERVER_CONFIG,
            "endpoints": endpoints,
            "messages": sum(e["messages"] for e in endpoints.values()),
            "crashes": len(self.crashes),
            "unhandled_exceptions": len(self.log_lines),
            "schema_violations": self.categories["schema"],
            "problems_by_category": dict(self.categories),
            "neighbour": {
                "unaffected": unaffected,
                "runs": self.neighbour["runs"],
                "mismatches": self.neighbour["mismatches"],
                "failed": self.neighbour["failed"],
                "first_failure": self.neighbour.get("first_failure"),
                "labels_alone": self.alone,
                "first_mismatch": self.neighbour["first_mismatch"],
            },
            "server_exit_code": exit_code,
            "server_rss_mb": {k: round(v, 1) for k, v in self.rss.items()},
            "examples": self.examples,
            "wall_s": round(wall, 1),
            "messages_per_s": round(sum(e["messages"] for e in endpoints.values()) / wall, 1),
            "problems": self.problems,
            "crash_scripts": self.crashes,
            "log_lines": self.log_lines[:KEEP],
            "machine": {
                **machine(),
                "server": "OMP_NUM_THREADS=1, --device cpu (benchmarks/common.spawn_server)",
            },
        }
        path = write_json(self.args.out, summary)
        for name, e in endpoints.items():
            print(
                f"/v1/{name}: {e['messages']} messages on {e['connections']} connections; replies "
                f"{json.dumps(e['replies'])}; closes {json.dumps(e['close_codes'])}"
            )
        print(
            f"crashes {summary['crashes']}, unhandled exceptions {summary['unhandled_exceptions']}, "
            f"schema violations {summary['schema_violations']}, problems {json.dumps(summary['problems_by_category'])}; "
            f"neighbour unaffected: {unaffected} ({self.neighbour['runs']} runs); server exit {exit_code}; "
            f"{summary['wall_s']} s"
        )
        print(f"wrote {path}")
        bad = sum(self.categories.values()) or self.crashes or not unaffected or exit_code != 0
        return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--messages", type=int, default=10_000, help="hostile messages to /v1/punct (default %(default)s)"
    )
    ap.add_argument(
        "--asr-messages", type=int, default=2_000, help="hostile messages to /v1/asr (default %(default)s)"
    )
    ap.add_argument(
        "--concurrency",
        type=int,
        default=4,
        help="hostile connections at once, at most (default %(default)s)",
    )
    ap.add_argument(
        "--out",
        default="fuzz.json",
        help="file name under benchmarks/results/, or a path (default %(default)s)",
    )
    return Fuzz(ap.parse_args()).main()


if __name__ == "__main__":
    sys.exit(main())
