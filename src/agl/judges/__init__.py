"""Judges: models that read other models' answers (docs/report.md).

`modes` (the paper's error modes and the rules the record decides; no model call) and
`error_modes` (the LLM judge of the remaining modes, run by the stage `judge`, whose
tables the report reads).
"""
