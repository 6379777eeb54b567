"""Encoding synthesized speech into OpenAI's ``/v1/audio/speech`` formats, piece by piece.

:class:`AudioEncoder` takes float32 mono samples as they are synthesized (a sentence at a time)
and hands back the encoded bytes ready so far, so a response can stream while the rest of the text
is still being spoken. What each format does when streamed:

* ``pcm``: raw signed 16-bit little-endian samples at the model's rate, no header; every call's
  bytes are final at once.
* ``wav``: a 44-byte RIFF/WAVE header then the same samples. The total length is unknown when the
  header goes out, so its RIFF and ``data`` sizes are ``0xFFFFFFFF``, as OpenAI's streamed wav
  has them: FFmpeg and Python's ``wave`` read such a file to its end.
  :func:`encode_whole` writes the exact sizes for an answer that is not streamed.
* ``mp3`` (LAME), ``opus`` (libopus in an OGG container), ``flac``, ``aac`` (FFmpeg's encoder in
  an ADTS stream): FFmpeg through PyAV, muxed into a sink that only collects bytes, so the muxer
  sees a non-seekable output and never goes back to patch a header. Encoders hold a little audio
  back (a frame or two of look-ahead, the OGG page being filled: pages close every 100 ms), which
  :meth:`AudioEncoder.finish` flushes. As a result: mp3 has no Xing/LAME header and ADTS none at
  all, so their decoders cannot trim the encoders' priming and padding (mp3 and aac decode about
  1,500 samples, 70 ms at 22 kHz, longer than what went in); the FLAC STREAMINFO has no sample
  count or MD5 (both allowed to be unknown); OGG/Opus is exact (its granule positions carry the
  pre-skip and the end trim). Opus always runs at 48 kHz: the samples are resampled to it. mp3
  and aac take the model's rate when the codec has it (both take 8-48 kHz), else the next rate
  above it.

An encoder is not thread-safe: one caller drives it (an engine's lane thread, one job after another).
"""

from __future__ import annotations

import contextlib
import io
import struct
import wave
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from engines.speech.types import AudioFormat

#: The RIFF and ``data`` chunk sizes of a streamed wav, whose length is unknown up front (as OpenAI).
UNKNOWN_WAV_SIZE = 0xFFFFFFFF


@dataclass(frozen=True, slots=True)
class _Codec:
    """How FFmpeg encodes one format.

    Attributes:
        container: FFmpeg muxer name.
        codec: FFmpeg encoder name.
        bit_rate: bits per second; 0 for a lossless codec.
        rate: a fixed output rate, Hz; 0 keeps the input's (or the codec's next rate above it).

    """

    container: str
    codec: str
    bit_rate: int
    rate: int = 0


# Bit rates for one channel of speech: transparent for eSpeak-like voices at 16-24 kHz, and a third
# of what FFmpeg's defaults (128 kb/s for mp3 and aac) would send.
_CODECS: dict[AudioFormat, _Codec] = {
    AudioFormat.MP3: _Codec("mp3", "libmp3lame", 64_000),
    # Opus codes everything at 48 kHz internally and its decoders always give 48 kHz.
    AudioFormat.OPUS: _Codec("ogg", "libopus", 32_000, rate=48_000),
    AudioFormat.FLAC: _Codec("flac", "flac", 0),
    AudioFormat.AAC: _Codec("adts", "aac", 64_000),
}

#: Container options: flush every packet to the sink (streaming); close OGG pages every 100 ms
#: rather than every second, so that each sentence's audio leaves with its sentence; no FLAC
#: padding block (8 KiB kept for rewriting the header later, which a stream never does).
_CONTAINER_OPTIONS: dict[AudioFormat, dict[str, str]] = {
    AudioFormat.OPUS: {"flush_packets": "1", "page_duration": "100000"},
    AudioFormat.FLAC: {"flush_packets": "1", "metadata_header_padding": "0"},
}


def to_int16(samples: np.ndarray) -> np.ndarray:
    """Float samples → signed 16-bit little-endian samples.

    Args:
        samples: float mono samples, shape (n,); values outside [-1, 1] are clipped.

    Returns:
        ``<i2`` array of shape (n,): ``round(x * 32767)``.

    """
    clipped = np.clip(np.asarray(samples, dtype=np.float32), -1.0, 1.0)
    return np.rint(clipped * 32767.0).astype("<i2")


def wav_header(sample_rate: int, data_bytes: int = UNKNOWN_WAV_SIZE) -> bytes:
    """The 44-byte RIFF/WAVE header of mono 16-bit PCM at ``sample_rate`` Hz.

    Args:
        sample_rate: samples per second, Hz.
        data_bytes: size of the sample data that follows; :data:`UNKNOWN_WAV_SIZE` (the default)
            for a stream of unknown length, which also makes the RIFF size unknown.

    """
    riff_size = UNKNOWN_WAV_SIZE if data_bytes == UNKNOWN_WAV_SIZE else 36 + data_bytes
    fmt = struct.pack("<HHIIHH", 1, 1, sample_rate, sample_rate * 2, 2, 16)  # PCM, mono, 16-bit
    return (
        b"RIFF"
        + struct.pack("<I", riff_size)
        + b"WAVEfmt "
        + struct.pack("<I", len(fmt))
        + fmt
        + b"data"
        + struct.pack("<I", data_bytes)
    )


class _Sink:
    """A write-only file for FFmpeg: collects bytes; no ``seek``, so muxers treat it as a stream."""

    def __init__(self) -> None:
        self.buffer = bytearray()

    def write(self, data: bytes) -> int:
        self.buffer += data
        return len(data)

    def take(self) -> bytes:
        """The bytes written since the last call."""
        data = bytes(self.buffer)
        self.buffer.clear()
        return data


class AudioEncoder:
    """A streaming encoder of mono speech: :meth:`encode` each piece, then :meth:`finish` once.

    The concatenation of everything :meth:`encode` and :meth:`finish` return is one valid file
    of ``audio_format`` (see the module notes for what each format holds back while streaming).
    Opening FFmpeg waits for the first call, so constructing one is cheap and does no work.

    Args:
        audio_format: the encoding.
        sample_rate: the rate of the samples given, Hz.

    Raises:
        ValueError: a sample rate that is not positive.

    """

    def __init__(self, audio_format: AudioFormat, sample_rate: int) -> None:
        if sample_rate <= 0:
            raise ValueError(f"sample_rate must be positive, got {sample_rate}")
        self.audio_format = AudioFormat(audio_format)
        self.sample_rate = sample_rate
        self._started = False
        self._finished = False
        self._samples_in = 0
        # FFmpeg state, opened by the first call for the formats it encodes.
        self._sink: _Sink | None = None
        self._container: Any = None
        self._stream: Any = None
        self._resampler: Any = None

    @property
    def output_rate(self) -> int:
        """Samples per second of the encoded audio, Hz.

        48,000 for opus; else :attr:`sample_rate`, unless mp3 or aac lacks it (then the codec's
        next rate above).
        """
        codec = _CODECS.get(self.audio_format)
        if codec is None:
            return self.sample_rate
        return codec.rate or _codec_rate(codec.codec, self.sample_rate)

    def encode(self, samples: np.ndarray) -> bytes:
        """Encode the next piece of audio and return the bytes ready so far (possibly none).

        Args:
            samples: float32 mono samples at :attr:`sample_rate`, shape (n,); clipped to [-1, 1].

        Raises:
            RuntimeError: called after :meth:`finish` or :meth:`close`.

        """
        if self._finished:
            raise RuntimeError("the encoder is finished")
        samples = np.asarray(samples, dtype=np.float32).reshape(-1)
        out = self._start()
        if self.audio_format in (AudioFormat.PCM, AudioFormat.WAV):
            return out + to_int16(samples).tobytes()
        if len(samples):
            self._encode_frame(np.clip(samples, -1.0, 1.0))
        return out + self._take()

    def finish(self) -> bytes:
        """Flush the encoder and the container, and return the last bytes; the file is then complete.

        Calling it again returns ``b""``.
        """
        if self._finished:
            return b""
        out = self._start()
        self._finished = True
        if self._container is None:
            return out
        import av

        try:
            for frame in self._resampler.resample(None):
                self._mux(frame)
            self._mux(None)
            self._container.close()
        except av.FFmpegError as exc:
            raise RuntimeError(f"{self.audio_format} encoding failed: {exc}") from exc
        out += self._take()
        self._release()
        return out

    def close(self) -> None:
        """Release FFmpeg's state without finishing (a stream the caller abandoned); idempotent."""
        self._finished = True
        if self._container is not None:
            # The output is discarded: only freeing FFmpeg's state matters.
            with contextlib.suppress(Exception):
                self._container.close()
            self._release()

    def _start(self) -> bytes:
        """Open the format on the first call; return its header bytes (once)."""
        if self._started:
            return b""
        self._started = True
        if self.audio_format is AudioFormat.PCM:
            return b""
        if self.audio_format is AudioFormat.WAV:
            return wav_header(self.sample_rate)
        import av

        codec = _CODECS[self.audio_format]
        self._sink = _Sink()
        container = av.open(
            self._sink,
            mode="w",
            format=codec.container,
            options=_CONTAINER_OPTIONS.get(self.audio_format, {"flush_packets": "1"}),
        )
        try:
            rate = self.output_rate
            stream = container.add_stream(codec.codec, rate=rate, layout="mono")
            if codec.bit_rate:
                stream.codec_context.bit_rate = codec.bit_rate
            stream.codec_context.open()  # sets frame_size and the sample format the encoder takes
            context = stream.codec_context
            # Converts float samples to the encoder's format and rate, and cuts them into its frames.
            self._resampler = av.AudioResampler(
                format=context.format.name, layout="mono", rate=rate, frame_size=context.frame_size or None
            )
            # The header now, so that even an empty stream is a well-formed file.
            container.start_encoding()
        except BaseException:
            container.close()
            raise
        self._container, self._stream = container, stream
        return self._take()

    def _encode_frame(self, samples: np.ndarray) -> None:
        import av

        frame = av.AudioFrame.from_ndarray(samples[np.newaxis, :], format="flt", layout="mono")
        frame.sample_rate = self.sample_rate
        frame.pts = self._samples_in
        frame.time_base = Fraction(1, self.sample_rate)
        self._samples_in += len(samples)
        try:
            for converted in self._resampler.resample(frame):
                self._mux(converted)
        except av.FFmpegError as exc:
            raise RuntimeError(f"{self.audio_format} encoding failed: {exc}") from exc

    def _mux(self, frame: Any) -> None:
        for packet in self._stream.encode(frame):
            self._container.mux(packet)

    def _take(self) -> bytes:
        return self._sink.take() if self._sink is not None else b""

    def _release(self) -> None:
        self._container = self._stream = self._resampler = None


def _codec_rate(codec: str, rate: int) -> int:
    """``rate`` if the encoder takes it, else its next rate above (its highest if none is above)."""
    import av

    rates = av.codec.Codec(codec, "w").audio_rates
    if not rates or rate in rates:
        return rate
    above = [r for r in rates if r >= rate]
    return min(above) if above else max(rates)


def encode_whole(audio_format: AudioFormat, samples: np.ndarray, sample_rate: int) -> bytes:
    """Encode a whole utterance at once: the non-streamed answer.

    Unlike a streamed wav, the wav written here has exact RIFF and ``data`` sizes. Every other
    format gives the same bytes as one :class:`AudioEncoder` fed everything at once.

    Args:
        audio_format: the encoding.
        samples: float32 mono samples at ``sample_rate``, shape (n,); clipped to [-1, 1].
        sample_rate: Hz.

    Raises:
        ValueError: a sample rate that is not positive.

    """
    if audio_format == AudioFormat.WAV:
        if sample_rate <= 0:
            raise ValueError(f"sample_rate must be positive, got {sample_rate}")
        buffer = io.BytesIO()
        with wave.open(buffer, "wb") as out:
            out.setnchannels(1)
            out.setsampwidth(2)
            out.setframerate(sample_rate)
            out.writeframes(to_int16(samples).tobytes())
        return buffer.getvalue()
    encoder = AudioEncoder(audio_format, sample_rate)
    return encoder.encode(samples) + encoder.finish()
