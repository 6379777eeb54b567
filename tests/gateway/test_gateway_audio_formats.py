"""Transcripts as OpenAI's response formats: SubRip and WebVTT cues, verbose_json, text, json, SSE events."""

from __future__ import annotations

from universal_runtime.v1 import speech_pb2 as pb

from gateway.schemas.audio import TranscriptionForm, TranslationForm
from gateway.translate import audio

INFO = pb.TranscribeResponse(info=pb.TranscriptionInfo(language="en", duration_seconds=3661.2))
SEGMENTS = [
    pb.TranscribeResponse(
        segment=pb.TranscriptSegment(
            id=0,
            start=0.0,
            end=1.5,
            text=" Hello there.",
            words=[
                pb.TranscriptWord(word="Hello", start=0.0, end=0.6, probability=0.9),
                pb.TranscriptWord(word="there", start=0.7, end=1.4, probability=0.8),
            ],
        )
    ),
    pb.TranscribeResponse(segment=pb.TranscriptSegment(id=1, start=3600.25, end=3661.0, text="Goodbye.")),
]


def test_srt_cues_are_numbered_with_comma_milliseconds():
    body, media_type = audio.transcript(
        TranscriptionForm(response_format="srt"), [INFO, *SEGMENTS], task="transcribe"
    )
    assert media_type.startswith("application/x-subrip")
    assert body == (
        "1\n00:00:00,000 --> 00:00:01,500\nHello there.\n\n2\n01:00:00,250 --> 01:01:01,000\nGoodbye.\n"
    )


def test_vtt_has_its_header_and_dot_milliseconds():
    body, media_type = audio.transcript(
        TranscriptionForm(response_format="vtt"), [INFO, *SEGMENTS], task="transcribe"
    )
    assert media_type.startswith("text/vtt")
    assert body == (
        "WEBVTT\n\n00:00:00.000 --> 00:00:01.500\nHello there.\n\n01:00:00.250 --> 01:01:01.000\nGoodbye.\n"
    )


def test_text_and_json_join_the_segments():
    text, media_type = audio.transcript(
        TranscriptionForm(response_format="text"), [INFO, *SEGMENTS], task="transcribe"
    )
    assert (text, media_type) == ("Hello there. Goodbye.\n", "text/plain; charset=utf-8")
    body, _ = audio.transcript(TranscriptionForm(), [INFO, *SEGMENTS], task="transcribe")
    assert body == {"text": "Hello there. Goodbye.", "usage": {"type": "duration", "seconds": 3662}}


def test_verbose_json_has_segments_and_words_only_when_asked():
    form = TranscriptionForm(response_format="verbose_json", timestamp_granularities=["word", "segment"])
    body, _ = audio.transcript(form, [INFO, *SEGMENTS], task="transcribe")
    assert (body["task"], body["language"], body["duration"]) == ("transcribe", "english", 3661.2)
    assert [s["id"] for s in body["segments"]] == [0, 1]
    assert body["segments"][1]["start"] == 3600.25
    assert [w["word"] for w in body["words"]] == ["Hello", "there"]
    plain, _ = audio.transcript(
        TranscriptionForm(response_format="verbose_json"), [INFO, *SEGMENTS], task="transcribe"
    )
    assert "words" not in plain


def test_words_are_asked_of_the_server_only_for_verbose_json():
    words = TranscriptionForm(response_format="verbose_json", timestamp_granularities=["word"])
    assert audio.transcribe_options(words, translate=False).word_timestamps
    assert not audio.transcribe_options(
        TranscriptionForm(timestamp_granularities=["word"]), translate=False
    ).word_timestamps
    translation = audio.transcribe_options(TranslationForm(model="m"), translate=True)
    assert translation.translate and translation.language == "" and translation.model == "m"


def test_the_event_stream_sends_a_delta_per_segment_then_done():
    stream = audio.TranscriptStream()
    events = [event for message in [INFO, *SEGMENTS] for event in stream.on_message(message)]
    assert events == [
        {"type": "transcript.text.delta", "delta": "Hello there."},
        {"type": "transcript.text.delta", "delta": " Goodbye."},
    ]
    assert stream.on_end() == [
        {
            "type": "transcript.text.done",
            "text": "Hello there. Goodbye.",
            "usage": {"type": "duration", "seconds": 3662},
        }
    ]
