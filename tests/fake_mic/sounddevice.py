"""Stands in for the ``sounddevice`` package in the mic client's end-to-end test: a microphone
that plays a raw 16 kHz PCM16 file (``$FAKE_MIC_PCM``) in real time, then silence, as Chromium's
``--use-file-for-fake-audio-capture`` does for the browser page. Only the sound card is replaced:
the client, the server, Whisper and the punctuator are the real ones."""

import os
import threading
import time


class RawInputStream:
    def __init__(self, samplerate, channels, dtype, blocksize, callback):
        assert channels == 1 and dtype == "int16"
        self.rate, self.block, self.callback = samplerate, blocksize, callback
        with open(os.environ["FAKE_MIC_PCM"], "rb") as f:
            self.pcm = f.read()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._play, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def _play(self):
        size, start, n = 2 * self.block, time.monotonic(), 0
        while not self._stop.is_set():
            chunk = self.pcm[n * size : (n + 1) * size].ljust(size, b"\0")
            self.callback(chunk, self.block, None, None)
            n += 1
            time.sleep(max(0.0, start + n * self.block / self.rate - time.monotonic()))
