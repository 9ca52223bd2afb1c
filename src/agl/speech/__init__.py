"""Speech: how many seconds of speech a clip holds and which language it is in (docs/speech.md).

`model` (which Whisper files are loaded, SHA-256-pinned), `listen` (batched Silero VAD, then
Whisper's language ID on the speech only), `tables` (the stage's outputs and the
`spoken_language` clip attribute), `census` (P(country | language) from CLDR x population, for
the langprior backend), `report_section` (the report's "What language alone tells") and
`espeak` (synthetic test speech).
"""
