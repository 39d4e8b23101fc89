"""benchmarks/server_load.py's own code against a real `streampunct serve`."""

from __future__ import annotations

import asyncio

from benchmarks.common import start_server
from benchmarks.lib.load_streams import punct_trial


def test_a_trial_whose_streams_are_refused_is_tallied_with_every_field_a_row_prints():
    """Streams beyond the server's limit do not open: the trial says so, and its tally still has
    the fields its row is printed from (a run of serve-ray at 40 streams crashed on the lag's)."""
    server = start_server("--max-streams", "1", "--device", "cpu")
    try:
        t = asyncio.run(punct_trial(server.url, ["so", "what", "now"] * 10, n=3, seconds=1.0))
    finally:
        server.stop()
    assert t["failures"] and "did not open" in t["failures"][0]
    assert t["client_loop_lag_max_ms"] is None and t["latency_s"]["p99"] is None
