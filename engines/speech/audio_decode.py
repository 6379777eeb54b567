"""Decode an uploaded audio file to float32 mono samples with PyAV (FFmpeg's libraries, bundled).

Bounded work: the encoded size is checked before anything is opened, container probing reads at
most :data:`PROBE_BYTES`, only the demuxers in :data:`DEMUXERS` may open the file, and decoding
stops at the first sample past ``limits.max_seconds`` (a header's duration is never trusted).
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

import numpy as np

from engines.errors import InvalidArgumentError, ResourceExhaustedError
from engines.reasons import Reason
from engines.speech.types import Audio, AudioLimits

if TYPE_CHECKING:
    import av

#: Demuxers an upload may be opened with (FFmpeg names; ``mov`` covers MP4 and M4A, ``matroska``
#: WebM). Others (image pipes, playlists such as ``hls`` or ``concat`` that open further URLs)
#: are refused before any of their code runs.
DEMUXERS = ("wav", "w64", "flac", "mp3", "ogg", "mov", "matroska", "aac", "aiff", "caf")
#: Bytes FFmpeg may read to identify the container and its streams (its default is 5 MB).
PROBE_BYTES = 1 << 20
#: Microseconds of media FFmpeg may read to find the streams' parameters (its default is 5 s).
ANALYZE_US = 2_000_000

_OPEN_OPTIONS = {
    "probesize": str(PROBE_BYTES),
    "analyzeduration": str(ANALYZE_US),
    "format_whitelist": ",".join(DEMUXERS),
}


def _decode_errors() -> tuple[type[BaseException], ...]:
    """What PyAV and FFmpeg raise for a file they cannot read.

    FFmpegError for the library's error codes; ValueError/UnicodeDecodeError for metadata or frames
    PyAV refuses; EOFError/OSError for reads past a truncated file. PyAV is imported here, not at
    the module's import: every process that lists the engines imports this module, and only a
    speech model's backend decodes (PyAV's libraries are about 24 MB of RSS).
    """
    import av

    return (av.FFmpegError, ValueError, UnicodeDecodeError, EOFError, OSError, IndexError)


def decode_audio(data: bytes, limits: AudioLimits, sample_rate: int) -> Audio:
    """Decode an encoded audio file (WAV, FLAC, MP3, OGG/Opus, M4A/AAC, WebM...) to mono samples.

    Blocking; run it on the engine's executor. Only the file's first audio stream is read; its
    channels are mixed down and it is resampled to ``sample_rate``.

    Args:
        data: the whole encoded file.
        limits: bounds on the file's bytes and on the decoded audio's seconds.
        sample_rate: rate of the returned samples, Hz (16000 for the speech models).

    Returns:
        :class:`Audio` with float32 samples of shape (n,), n >= 1, at ``sample_rate``.

    Raises:
        InvalidArgumentError: empty data or no decoded sample (EMPTY_FILE); no audio stream, an
            unknown container, or a file that cannot be decoded (UNSUPPORTED_FORMAT).
        ResourceExhaustedError: ``data`` over ``limits.max_bytes`` (FILE_TOO_LARGE, checked
            before opening), or more than ``limits.max_seconds`` of decoded audio
            (AUDIO_TOO_LONG, raised as soon as decoding passes it; the rest is not decoded).

    """
    if not data:
        raise InvalidArgumentError("the audio file is empty", reason=Reason.EMPTY_FILE)
    if len(data) > limits.max_bytes:
        raise ResourceExhaustedError(
            f"the audio file has {len(data)} bytes, over the limit of {limits.max_bytes}",
            reason=Reason.FILE_TOO_LARGE,
            max_bytes=limits.max_bytes,
        )
    import av

    decode_errors = _decode_errors()
    max_samples = int(limits.max_seconds * sample_rate)
    try:
        container = av.open(io.BytesIO(data), mode="r", options=_OPEN_OPTIONS, metadata_errors="replace")
    except decode_errors as exc:
        raise _unsupported(f"it is not an audio file of a known format ({_reason(exc)})") from None
    try:
        if not container.streams.audio:
            raise _unsupported("it holds no audio stream")
        samples = _decode_stream(container, container.streams.audio[0], sample_rate, max_samples, limits)
    except decode_errors as exc:
        raise _unsupported(f"it cannot be decoded ({_reason(exc)})") from None
    finally:
        container.close()
    if samples.size == 0:
        raise InvalidArgumentError("the audio file holds no audio samples", reason=Reason.EMPTY_FILE)
    return Audio(samples=samples, sample_rate=sample_rate)


def _decode_stream(
    container: av.container.InputContainer,
    stream: av.AudioStream,
    sample_rate: int,
    max_samples: int,
    limits: AudioLimits,
) -> np.ndarray:
    """The stream's samples, mono float32 at ``sample_rate``, at most ``max_samples`` of them.

    Packets the decoder refuses are skipped unless they outnumber the good ones.
    """
    import av

    resampler = av.AudioResampler(
        format="flt", layout="mono", rate=sample_rate, options={"rematrix_maxval": "1.0"}
    )
    chunks: list[np.ndarray] = []
    count = 0

    def take(frames: list[av.AudioFrame]) -> None:
        nonlocal count
        for out in frames:
            chunk = out.to_ndarray().reshape(-1)
            chunks.append(chunk)
            count += chunk.size
            if count > max_samples:
                raise ResourceExhaustedError(
                    f"the audio is longer than the limit of {limits.max_seconds:g} s",
                    reason=Reason.AUDIO_TOO_LONG,
                    max_seconds=limits.max_seconds,
                )

    good = bad = 0
    for packet in container.demux(stream):
        try:
            frames = packet.decode()
        except av.FFmpegError:
            # A damaged packet is skipped, as FFmpeg's own tools do: one glitch in a long
            # recording does not refuse the file; a file mostly of them is refused below.
            bad += 1
            continue
        good += 1
        for frame in frames:
            # Timestamps are not needed (samples are taken in order), and a file's odd ones
            # must not make the resampler pad or drop audio.
            frame.pts = None
            take(resampler.resample(frame))
    take(resampler.resample(None))  # the resampler's delay line
    if bad > good:
        raise _unsupported(f"{bad} of its {good + bad} audio packets cannot be decoded")
    if not chunks:
        return np.zeros(0, dtype=np.float32)
    return np.concatenate(chunks).astype(np.float32, copy=False)


def _unsupported(why: str) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"the audio file cannot be read: {why}; send WAV, FLAC, MP3, OGG/Opus, M4A/AAC or WebM",
        reason=Reason.UNSUPPORTED_FORMAT,
    )


def _reason(exc: BaseException) -> str:
    """A short, safe description of a decoder error (FFmpeg's message, never a traceback)."""
    message = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    return str(message)[:200]
