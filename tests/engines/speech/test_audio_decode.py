"""Decoding uploads (engines.speech.audio_decode): the common formats, and every kind of bad input.

Files are made here by encoding a 440 Hz tone with PyAV; a decoded file must come back as float32
mono at 16 kHz with its length and pitch, and bad input must fail with the documented reason,
never with one of PyAV's exceptions.
"""

from __future__ import annotations

import io
import struct

import av
import numpy as np
import pytest
from PIL import Image

from engines.errors import InvalidArgumentError, ResourceExhaustedError, RuntimeServiceError
from engines.reasons import Reason
from engines.speech.audio_decode import decode_audio
from engines.speech.types import AudioLimits
from tests.spoken import encode, tone

LIMITS = AudioLimits(max_bytes=20_000_000, max_seconds=120.0)
CD_RATE = 44100

FORMATS = {
    "wav-s16-44k-stereo": ("wav", "pcm_s16le", "stereo", None),
    "flac": ("flac", "flac", "mono", None),
    "mp3": ("mp3", "libmp3lame", "mono", None),
    "ogg-opus": ("ogg", "libopus", "mono", 48000),
    "m4a-aac": ("ipod", "aac", "stereo", None),
    "webm-opus": ("webm", "libopus", "mono", 48000),
}


def dominant_frequency(samples: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(samples * np.hanning(len(samples))))
    return float(np.fft.rfftfreq(len(samples), 1 / rate)[spectrum.argmax()])


@pytest.fixture(scope="module")
def tone_files() -> dict[str, bytes]:
    signal = tone(2.0, rate=CD_RATE)
    return {
        name: encode(signal, CD_RATE, container, codec, layout=layout, codec_rate=codec_rate)
        for name, (container, codec, layout, codec_rate) in FORMATS.items()
    }


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_formats_decode_to_mono_16k_with_length_and_pitch(tone_files: dict[str, bytes], name: str) -> None:
    audio = decode_audio(tone_files[name], LIMITS, 16000)
    assert audio.sample_rate == 16000
    assert audio.samples.dtype == np.float32 and audio.samples.ndim == 1
    # Codecs pad by a frame or two (AAC priming, MP3 delay).
    assert audio.duration_s == pytest.approx(2.0, abs=0.1)
    assert dominant_frequency(audio.samples, 16000) == pytest.approx(440, abs=3)
    # Mixing two equal channels down keeps the level (no +3 dB from summing them).
    assert np.abs(audio.samples).max() == pytest.approx(0.3, abs=0.05)


def test_empty_file_is_empty_file() -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        decode_audio(b"", LIMITS, 16000)
    assert caught.value.reason == Reason.EMPTY_FILE


@pytest.mark.parametrize("seed", range(8))
def test_random_bytes_are_unsupported(seed: int) -> None:
    data = np.random.default_rng(seed).bytes(20_000)
    with pytest.raises(InvalidArgumentError) as caught:
        decode_audio(data, LIMITS, 16000)
    assert caught.value.reason == Reason.UNSUPPORTED_FORMAT
    assert "cannot be read" in caught.value.message


def test_text_and_png_are_unsupported() -> None:
    png = io.BytesIO()
    Image.new("RGB", (64, 64), (255, 0, 0)).save(png, "PNG")
    for data in (png.getvalue(), b"this is not audio at all\n" * 100):
        with pytest.raises(InvalidArgumentError) as caught:
            decode_audio(data, LIMITS, 16000)
        assert caught.value.reason == Reason.UNSUPPORTED_FORMAT


def test_video_without_audio_is_unsupported() -> None:
    buffer = io.BytesIO()
    with av.open(buffer, mode="w", format="matroska") as output:
        stream = output.add_stream("ffv1", rate=10)
        stream.width, stream.height, stream.pix_fmt = 32, 32, "yuv420p"
        for _ in range(3):
            frame = av.VideoFrame.from_ndarray(np.zeros((32, 32, 3), np.uint8), format="rgb24")
            for packet in stream.encode(frame):
                output.mux(packet)
        for packet in stream.encode(None):
            output.mux(packet)
    with pytest.raises(InvalidArgumentError) as caught:
        decode_audio(buffer.getvalue(), LIMITS, 16000)
    assert caught.value.reason == Reason.UNSUPPORTED_FORMAT
    assert "no audio stream" in caught.value.message


def test_truncated_files_fail_cleanly(tone_files: dict[str, bytes]) -> None:
    # The first 100 bytes of an MP3 are its first frame's header, not decodable audio.
    with pytest.raises(InvalidArgumentError) as caught:
        decode_audio(tone_files["mp3"][:100], LIMITS, 16000)
    assert caught.value.reason == Reason.UNSUPPORTED_FORMAT
    # A WAV cut after its header holds a few bytes of samples, fewer than one output sample:
    # readable, but empty.
    with pytest.raises(InvalidArgumentError) as caught:
        decode_audio(tone_files["wav-s16-44k-stereo"][:100], LIMITS, 16000)
    assert caught.value.reason in (Reason.EMPTY_FILE, Reason.UNSUPPORTED_FORMAT)
    # Cut inside its header: not a WAV file at all.
    with pytest.raises(InvalidArgumentError) as caught:
        decode_audio(tone_files["wav-s16-44k-stereo"][:30], LIMITS, 16000)
    assert caught.value.reason == Reason.UNSUPPORTED_FORMAT


def test_file_cut_midway_decodes_what_it_holds(tone_files: dict[str, bytes]) -> None:
    data = tone_files["mp3"]
    audio = decode_audio(data[: len(data) // 2], LIMITS, 16000)
    assert 0.5 < audio.duration_s < 1.5


@pytest.mark.parametrize("name", ["mp3", "ogg-opus", "m4a-aac", "flac"])
@pytest.mark.parametrize("seed", range(4))
def test_corrupted_files_never_leak_decoder_errors(
    tone_files: dict[str, bytes], name: str, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    data = np.frombuffer(tone_files[name], dtype=np.uint8).copy()
    positions = rng.integers(0, len(data), size=len(data) // 50)
    data[positions] = rng.integers(0, 256, size=len(positions), dtype=np.uint8)
    try:
        audio = decode_audio(data.tobytes(), LIMITS, 16000)
    except RuntimeServiceError as exc:
        assert exc.reason in (Reason.UNSUPPORTED_FORMAT, Reason.EMPTY_FILE)
    else:
        assert audio.samples.dtype == np.float32 and audio.samples.size > 0


def test_header_claiming_hours_decodes_what_is_there() -> None:
    data = bytearray(encode(tone(1.0, rate=CD_RATE), CD_RATE, "wav", "pcm_s16le"))
    data[4:8] = struct.pack("<I", 0xFFFFFFF0)  # RIFF size
    chunk = data.find(b"data")
    data[chunk + 4 : chunk + 8] = struct.pack("<I", 0xFFFFFFF0)  # data size: about 6.8 hours
    audio = decode_audio(bytes(data), AudioLimits(max_bytes=10_000_000, max_seconds=10.0), 16000)
    assert audio.duration_s == pytest.approx(1.0, abs=0.01)


def test_over_max_bytes_is_refused_before_opening() -> None:
    # Not even a valid file: the size is checked first.
    with pytest.raises(ResourceExhaustedError) as caught:
        decode_audio(b"\0" * 1001, AudioLimits(max_bytes=1000, max_seconds=60), 16000)
    assert caught.value.reason == Reason.FILE_TOO_LARGE


def test_over_max_seconds_stops_decoding(monkeypatch: pytest.MonkeyPatch) -> None:
    data = encode(tone(60.0, rate=CD_RATE), CD_RATE, "flac", "flac")
    produced: list[int] = []
    original = av.AudioResampler

    class Counting:
        def __init__(self, *args: object, **kwargs: object) -> None:
            self.inner = original(*args, **kwargs)

        def resample(self, frame: av.AudioFrame | None) -> list[av.AudioFrame]:
            frames = self.inner.resample(frame)
            produced.extend(f.samples for f in frames)
            return frames

    monkeypatch.setattr(av, "AudioResampler", Counting)
    with pytest.raises(ResourceExhaustedError) as caught:
        decode_audio(data, AudioLimits(max_bytes=50_000_000, max_seconds=2.0), 16000)
    assert caught.value.reason == Reason.AUDIO_TOO_LONG
    # Stopped at the first frame past 2 s, not after decoding the whole minute.
    assert 2.0 * 16000 < sum(produced) < 3.0 * 16000


def test_audio_at_the_limit_is_accepted() -> None:
    data = encode(tone(2.0), 16000, "wav", "pcm_s16le")
    assert decode_audio(data, AudioLimits(max_bytes=len(data), max_seconds=2.0), 16000).duration_s == 2.0


def test_other_output_rates() -> None:
    audio = decode_audio(encode(tone(1.0), 16000, "flac", "flac"), LIMITS, 8000)
    assert audio.sample_rate == 8000
    assert audio.duration_s == pytest.approx(1.0, abs=0.01)
