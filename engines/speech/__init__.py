"""Speech engines: speech to text (``Transcriber``) and text to speech (``SpeechSynthesizer``)."""
