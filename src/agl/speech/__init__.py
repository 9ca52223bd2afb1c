"""Speech: how many seconds of speech a clip holds and which language it is in (docs/speech.md).

`model` (which Whisper files are loaded, SHA-256-pinned), `listen` (batched Silero VAD, then
Whisper's language ID on the speech only), `tables` (the stage's outputs and the
`spoken_language` clip attribute), `census` (P(country | language) from CLDR x population, for
the langprior backend) and `espeak` (synthetic test speech). The report's section "What
language alone tells" is `agl.report.sections.speech`.
"""
