"""Speech and audio files for the speech tests, made in the test: eSpeak NG speaks, PyAV encodes.

Nothing is downloaded: files are made by encoding generated signals, and test speech is
synthesized by eSpeak NG (:mod:`engines.speech.espeak`, the text-to-speech default), so
transcription tests hear one engine through another (PocketSphinx, the speech-to-text default).
"""

from __future__ import annotations

import io
import struct
import wave

import av
import numpy as np

from engines.speech.espeak import speak

#: Sentences PocketSphinx's US English model hears right from eSpeak NG's en-us voice (at 175 words
#: a minute; others, such as "the quick brown fox...", it does not).
SENTENCES = ("open the door please", "i would like a cup of coffee")

RATE = 16000


def encode(
    samples: np.ndarray,
    rate: int,
    container: str,
    codec: str,
    *,
    layout: str = "mono",
    codec_rate: int | None = None,
) -> bytes:
    """``samples`` (float32 mono at ``rate``) encoded with PyAV as ``codec`` in ``container``.

    Stereo copies the mono signal to both channels; ``codec_rate`` resamples first (Opus: 48 kHz).
    """
    out_rate = codec_rate or rate
    channels = 2 if layout == "stereo" else 1
    planar = np.ascontiguousarray(np.tile(samples.astype(np.float32)[None, :], (channels, 1)))
    frame = av.AudioFrame.from_ndarray(planar, format="fltp", layout=layout)
    frame.sample_rate = rate
    buffer = io.BytesIO()
    with av.open(buffer, mode="w", format=container) as output:
        stream = output.add_stream(codec, rate=out_rate, layout=layout)
        sample_format = stream.codec_context.codec.audio_formats[0].name
        resampler = av.AudioResampler(format=sample_format, layout=layout, rate=out_rate)
        for chunk in [*resampler.resample(frame), *resampler.resample(None)]:
            for packet in stream.encode(chunk):
                output.mux(packet)
        for packet in stream.encode(None):
            output.mux(packet)
    return buffer.getvalue()


def wav(samples: np.ndarray, rate: int = RATE) -> bytes:
    """16-bit mono WAV of ``samples``."""
    return encode(samples, rate, "wav", "pcm_s16le")


def resample(samples: np.ndarray, rate: int, to_rate: int = RATE) -> np.ndarray:
    """``samples`` (float32 mono) resampled from ``rate`` to ``to_rate`` with PyAV."""
    frame = av.AudioFrame.from_ndarray(samples.astype(np.float32)[None, :], format="flt", layout="mono")
    frame.sample_rate = rate
    resampler = av.AudioResampler(format="flt", layout="mono", rate=to_rate)
    chunks = [f.to_ndarray().reshape(-1) for f in [*resampler.resample(frame), *resampler.resample(None)]]
    return np.concatenate(chunks).astype(np.float32)


def tone(seconds: float, frequency: float = 440.0, rate: int = RATE, amplitude: float = 0.3) -> np.ndarray:
    """A sine tone, float32."""
    t = np.arange(int(seconds * rate)) / rate
    return (amplitude * np.sin(2 * np.pi * frequency * t)).astype(np.float32)


def silence(seconds: float, rate: int = RATE) -> np.ndarray:
    """Digital silence, float32."""
    return np.zeros(int(seconds * rate), dtype=np.float32)


def speech(text: str, words_per_minute: int = 175) -> np.ndarray:
    """eSpeak NG's US English voice saying ``text``, float32 mono at 16 kHz."""
    audio = speak(text, voice="en-us", words_per_minute=words_per_minute)
    return resample(audio.samples, audio.sample_rate)


def spoken_extent(samples: np.ndarray, rate: int = RATE, level: float = 0.01) -> tuple[float, float]:
    """Seconds of the first and last sample louder than ``level``: where the speech really is."""
    loud = np.flatnonzero(np.abs(samples) > level)
    return loud[0] / rate, (loud[-1] + 1) / rate


def word_errors(reference: str, hypothesis: str) -> tuple[int, int]:
    """(edit distance in words, words in the reference): the word error rate's numerator and denominator."""
    ref, hyp = reference.split(), hypothesis.split()
    row = list(range(len(hyp) + 1))
    for i, word in enumerate(ref, 1):
        previous, row[0] = row[0], i
        for j, other in enumerate(hyp, 1):
            previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, previous + (word != other))
    return row[-1], len(ref)


def decode(data: bytes) -> tuple[np.ndarray, int]:
    """Float mono samples (the first channel) and the rate of an encoded file, decoded by PyAV."""
    pieces, rate = [], 0
    with av.open(io.BytesIO(data)) as container:
        for frame in container.decode(audio=0):
            array = frame.to_ndarray()
            array = array[0] if frame.format.is_planar else array.reshape(-1)[:: len(frame.layout.channels)]
            if array.dtype == np.int16:
                array = array.astype(np.float32) / 32768.0
            pieces.append(array.astype(np.float32))
            rate = frame.sample_rate
    return (np.concatenate(pieces) if pieces else np.zeros(0, np.float32)), rate


def decoded_seconds(data: bytes) -> float:
    """Seconds of audio in an encoded file."""
    samples, rate = decode(data)
    return len(samples) / rate if rate else 0.0


def spoken_wav(*texts: str, gap_s: float = 1.0) -> bytes:
    """A 16 kHz WAV of ``texts`` spoken in turn, ``gap_s`` of silence between them."""
    pieces = []
    for i, text in enumerate(texts):
        if i:
            pieces.append(silence(gap_s))
        pieces.append(speech(text))
    return wav(np.concatenate(pieces))


def silent_flac(seconds: float, rate: int = 8000) -> bytes:
    """A FLAC of ``seconds`` of silence: hours of audio in a few hundred KB (a decompression bomb)."""
    return encode(silence(seconds, rate), rate, "flac", "flac")


def wav_claiming(seconds: float, actual_s: float = 1.0, rate: int = RATE) -> bytes:
    """A WAV whose header claims ``seconds`` of audio but holds ``actual_s`` (a lying header)."""
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as file:  # the canonical 44-byte header, sizes at bytes 4 and 40
        file.setnchannels(1)
        file.setsampwidth(2)
        file.setframerate(rate)
        file.writeframes(bytes(2 * int(actual_s * rate)))
    real = buffer.getvalue()
    claimed = int(seconds * rate * 2)
    return real[:4] + struct.pack("<I", claimed + 36) + real[8:40] + struct.pack("<I", claimed) + real[44:]


def normalized_words(text: str) -> list[str]:
    """The words of ``text``, lower-case, without the punctuation around them."""
    return [w.strip(".,!?").lower() for w in text.split() if w.strip(".,!?")]


def normalized_word_errors(reference: str, hypothesis: str) -> tuple[int, int]:
    """:func:`word_errors` of the two texts' :func:`normalized_words`."""
    return word_errors(" ".join(normalized_words(reference)), " ".join(normalized_words(hypothesis)))


def word_error_rate(reference: str, hypothesis: str) -> float:
    """Word error rate of ``hypothesis``, case and punctuation aside."""
    errors, count = normalized_word_errors(reference, hypothesis)
    return errors / count
