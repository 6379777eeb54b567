"""The speech encoder (engines.speech.audio_encode): every response format, streamed and whole.

Each format's bytes are decoded back with PyAV (FFmpeg): the length survives within a codec frame
or two, a 440 Hz tone keeps its pitch, and streaming in pieces gives the length of encoding at once.
"""

from __future__ import annotations

import io
import struct
import wave

import numpy as np
import pytest

from engines.speech.audio_encode import UNKNOWN_WAV_SIZE, AudioEncoder, encode_whole, to_int16
from engines.speech.types import AudioFormat
from tests.spoken import decode

RATE = 22050
CODEC_FORMATS = (AudioFormat.MP3, AudioFormat.OPUS, AudioFormat.FLAC, AudioFormat.AAC)
#: Two codec frames at most: mp3 and aac pad the start (no header to trim it when streamed).
LENGTH_TOLERANCE_S = 2 * 1152 / RATE


def tone(seconds: float = 1.0, frequency: float = 440.0, rate: int = RATE) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (0.5 * np.sin(2 * np.pi * frequency * t)).astype(np.float32)


def dominant_frequency(samples: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(samples * np.hanning(len(samples))))
    return float(np.fft.rfftfreq(len(samples), 1 / rate)[np.argmax(spectrum)])


def stream(audio_format: AudioFormat, samples: np.ndarray, pieces: int) -> tuple[bytes, list[bytes]]:
    encoder = AudioEncoder(audio_format, RATE)
    chunks = [encoder.encode(piece) for piece in np.array_split(samples, pieces)]
    chunks.append(encoder.finish())
    return b"".join(chunks), chunks


@pytest.mark.parametrize("audio_format", list(AudioFormat))
def test_round_trip_keeps_length_and_pitch(audio_format: AudioFormat) -> None:
    samples = tone()
    if audio_format is AudioFormat.PCM:
        decoded, rate = np.frombuffer(encode_whole(audio_format, samples, RATE), "<i2") / 32768.0, RATE
    else:
        decoded, rate = decode(encode_whole(audio_format, samples, RATE))
    if audio_format is AudioFormat.OPUS:
        assert rate == 48_000  # Opus decodes at 48 kHz whatever went in
    else:
        assert rate == RATE
    assert abs(len(decoded) / rate - len(samples) / RATE) <= LENGTH_TOLERANCE_S
    assert abs(dominant_frequency(decoded, rate) - 440.0) < 5.0


@pytest.mark.parametrize("audio_format", CODEC_FORMATS)
def test_streamed_in_pieces_decodes_to_the_whole_length(audio_format: AudioFormat) -> None:
    samples = tone(2.0)
    whole, _ = decode(encode_whole(audio_format, samples, RATE))
    streamed, chunks = stream(audio_format, samples, pieces=5)
    pieces, _ = decode(streamed)
    assert len(pieces) == len(whole)
    # Bytes come out while streaming, not only at the end.
    assert sum(len(chunk) for chunk in chunks[:-1]) > len(streamed) / 2


@pytest.mark.parametrize("audio_format", [AudioFormat.PCM, AudioFormat.WAV])
def test_pcm_and_wav_samples_are_exact(audio_format: AudioFormat) -> None:
    expected = np.arange(-32767, 32768, 97, dtype=np.int16)
    samples = expected.astype(np.float32) / 32767.0
    streamed, _ = stream(audio_format, samples, pieces=5)
    if audio_format is AudioFormat.PCM:
        got = np.frombuffer(streamed, "<i2")
    else:
        assert streamed[:4] == b"RIFF" and streamed[8:16] == b"WAVEfmt "
        got = np.frombuffer(streamed[44:], "<i2")
        with wave.open(io.BytesIO(streamed)) as reader:  # reads to the end despite unknown sizes
            assert reader.getframerate() == RATE and reader.getsampwidth() == 2
            assert np.array_equal(np.frombuffer(reader.readframes(1 << 30), "<i2"), expected)
        decoded, _ = decode(streamed)
        assert np.array_equal(np.rint(decoded * 32768).astype(np.int16), expected)
    assert np.array_equal(got, expected)


def test_streamed_wav_has_unknown_sizes_and_whole_wav_exact_ones() -> None:
    samples = tone(0.5)
    streamed, _ = stream(AudioFormat.WAV, samples, pieces=3)
    assert struct.unpack("<I", streamed[4:8])[0] == UNKNOWN_WAV_SIZE
    assert streamed[36:40] == b"data" and struct.unpack("<I", streamed[40:44])[0] == UNKNOWN_WAV_SIZE
    whole = encode_whole(AudioFormat.WAV, samples, RATE)
    assert struct.unpack("<I", whole[4:8])[0] == len(whole) - 8
    with wave.open(io.BytesIO(whole)) as reader:
        assert reader.getnframes() == len(samples)
    assert whole[44:] == streamed[44:]


def test_samples_are_clipped() -> None:
    samples = np.array([2.0, -3.0, 0.5, np.float32(1.0)], dtype=np.float32)
    assert to_int16(samples).tolist() == [32767, -32767, 16384, 32767]
    assert np.frombuffer(encode_whole(AudioFormat.PCM, samples, RATE), "<i2").tolist() == [
        32767,
        -32767,
        16384,
        32767,
    ]


@pytest.mark.parametrize("audio_format", list(AudioFormat))
def test_empty_input_gives_a_valid_stream(audio_format: AudioFormat) -> None:
    encoder = AudioEncoder(audio_format, RATE)
    data = encoder.encode(np.zeros(0, np.float32)) + encoder.finish()
    assert encoder.finish() == b""  # finishing twice adds nothing
    if audio_format is AudioFormat.PCM:
        assert data == b""
    elif audio_format is AudioFormat.WAV:
        assert len(data) == 44
        with wave.open(io.BytesIO(encode_whole(audio_format, np.zeros(0, np.float32), RATE))) as reader:
            assert reader.getnframes() == 0
    elif audio_format is AudioFormat.FLAC:
        assert len(decode(data)[0]) == 0
    # mp3 (an ID3 tag), opus (OGG header pages) and aac (nothing) hold no audio frame to decode.


def test_encoder_refuses_use_after_finish_and_close_is_idempotent() -> None:
    encoder = AudioEncoder(AudioFormat.MP3, RATE)
    assert encoder.encode(tone(0.1))  # the ID3 header at least
    encoder.close()
    encoder.close()
    with pytest.raises(RuntimeError):
        encoder.encode(tone(0.1))
    with pytest.raises(ValueError):
        AudioEncoder(AudioFormat.WAV, 0)


def test_output_rates() -> None:
    assert AudioEncoder(AudioFormat.OPUS, RATE).output_rate == 48_000
    for audio_format in (
        AudioFormat.PCM,
        AudioFormat.WAV,
        AudioFormat.MP3,
        AudioFormat.FLAC,
        AudioFormat.AAC,
    ):
        assert AudioEncoder(audio_format, RATE).output_rate == RATE


def test_mp3_and_aac_resample_a_rate_the_codec_lacks() -> None:
    samples = tone(1.0, rate=23000)
    encoder = AudioEncoder(AudioFormat.MP3, 23000)
    assert encoder.output_rate == 24000
    decoded, rate = decode(encoder.encode(samples) + encoder.finish())
    assert rate == 24000
    assert abs(dominant_frequency(decoded, rate) - 440.0) < 5.0
