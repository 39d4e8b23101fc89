"""Live captions from the microphone, in the terminal.

    python -m streampunct.clients.mic [--url ws://127.0.0.1:8765] [--lookahead 2] [--out captions]

Speak; the line being spoken shows each word in bright with its mark as soon as its punctuation is
final, the recogniser's guess after them dim; finished caption lines scroll up. Ctrl-C ends the stream: the server finalises what was said, and
``OUT.srt`` and ``OUT.vtt`` (default ``captions``) are written. A session lost on the way (the server
failed or the connection dropped) still writes the captions received, says what happened in one
line and exits with status 1; a second Ctrl-C stops waiting for the last words: those shown are
written, exit status 130.
Needs sounddevice and PortAudio (``pip install sounddevice``; Debian: ``apt install libportaudio2``).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from websockets.exceptions import ConnectionClosed

from streampunct import protocol as P
from streampunct.captions import Caption
from streampunct.clients.common import (
    ClientError,
    Interrupted,
    Recognition,
    SessionLost,
    Transcript,
    add_stream_args,
    add_subtitle_args,
    finish,
    messages,
    open_stream,
    run_client,
    server_says,
    stream_config,
)
from streampunct.flags import Parser
from streampunct.text import shown_word

END_WAIT_S = 30.0  # after Ctrl-C, how long the server may take to send the last captions

DIM, BRIGHT, RESET, CLEAR = "\033[2m", "\033[1m", "\033[0m", "\r\033[K"


class Screen:
    """Final captions scroll up in bright; the line in progress is redrawn in place: each word in
    bright with its mark as soon as its punctuation is final, recognised words not final yet in
    normal, the recogniser's provisional guess dim."""

    def __init__(self, out: Any = sys.stdout):
        self.out = out
        self.committed: dict[int, tuple[str, str | None]] = {}  # not yet in a caption: text, final mark
        self.provisional: list[str] = []
        self.sentence_start = True

    def words(self, msg: P.Recognised) -> None:
        for i, w in enumerate(msg.committed):
            self.committed[msg.first + i] = (w.text, None)
        self.provisional = [w.text for w in msg.provisional]
        self.redraw()

    def events(self, msg: P.Events) -> None:
        for e in msg.events:
            if e.final and e.index in self.committed:
                self.committed[e.index] = (self.committed[e.index][0], e.mark)
        self.redraw()

    def caption(self, c: Caption) -> None:
        for i in range(c.first, c.last + 1):
            self.committed.pop(i, None)
        self.sentence_start = c.text.endswith((".", "?", "!"))
        self.out.write(f"{CLEAR}{BRIGHT}{c.text}{RESET}\n")
        self.redraw()

    def line(self) -> str:
        """The line in progress, with its escape codes."""
        parts, start = [], self.sentence_start
        for text, mark in self.committed.values():
            if mark is None:
                parts.append(text)
                continue
            text = shown_word(text)  # the recogniser's own marks off: one mark, the punctuator's
            if not text:
                continue
            if start:
                text = text[:1].upper() + text[1:]
            parts.append(f"{BRIGHT}{text}{mark}{RESET}")
            start = mark in (".", "?")
        return " ".join(parts + [DIM + " ".join(self.provisional) + RESET])

    def redraw(self) -> None:
        self.out.write(CLEAR + self.line()[-400:])
        self.out.flush()


async def main(args: argparse.Namespace) -> int:
    try:
        import sounddevice as sd
    except (ImportError, OSError) as e:
        raise ClientError(
            f"the microphone needs sounddevice and PortAudio ({e}): pip install sounddevice"
        ) from e
    loop = asyncio.get_running_loop()
    chunks: asyncio.Queue[bytes] = asyncio.Queue()

    def on_audio(indata: Any, frames: int, t: Any, status: Any) -> None:
        loop.call_soon_threadsafe(chunks.put_nowait, bytes(indata))

    ws, _ = await open_stream(args.url, "/v1/asr", stream_config(args), args.token)
    screen = Screen()
    transcript = Transcript.of(args)

    recognition = Recognition(prefix="\n")

    async def receive() -> None:
        async for msg in messages(ws):
            recognition.see(msg)
            transcript.see(msg)
            match msg:
                case P.Recognised():
                    screen.words(msg)
                case P.Events():
                    screen.events(msg)
                case P.Captioned(caption):
                    screen.caption(caption)
                case P.Error(code, message):
                    server_says(f"{code}: {message}", prefix="\n")

    receiver = asyncio.create_task(receive())
    try:
        device = sd.RawInputStream(
            samplerate=16000, channels=1, dtype="int16", blocksize=4000, callback=on_audio
        )
    except Exception as e:
        raise ClientError(f"cannot open the microphone: {e}") from e
    print("Listening; Ctrl-C to stop.", file=sys.stderr)
    try:
        with device:
            while not receiver.done():  # the server may end the stream first
                await ws.send(await chunks.get())
    except (KeyboardInterrupt, asyncio.CancelledError):
        print("\nStopping: the last words are being punctuated ...", file=sys.stderr)
    except ConnectionClosed:
        pass  # the receiver says how the session ended
    lost = None
    try:  # a server that never answers must not keep the captions from being written
        await asyncio.wait_for(finish(ws, receiver), END_WAIT_S)
    except asyncio.TimeoutError:
        lost = SessionLost(f"the server did not answer the end of the stream in {END_WAIT_S:.0f} s")
    except SessionLost as e:
        lost = e
    except asyncio.CancelledError:  # a second Ctrl-C
        lost = Interrupted("interrupted")
    await ws.close()
    print(file=sys.stdout)
    if lost is not None:
        raise transcript.keep(lost, args.out)
    for p in transcript.write(args.out):
        print(f"wrote {p}", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = Parser(
        prog="streampunct mic", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--out", default="captions", help="prefix of the .srt and .vtt files (default: captions)")
    add_stream_args(ap)
    add_subtitle_args(ap)
    return ap


def cli(argv: list[str] | None = None) -> int:
    return run_client(main, build_parser(), argv)


if __name__ == "__main__":
    sys.exit(cli())
