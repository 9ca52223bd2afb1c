"""Results other tools read: Every Eval Ever (EEE 0.3.0) records out and in (docs/interchange.md)."""
