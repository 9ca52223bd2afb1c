"""The providers' batch APIs, one module each, registered with `@provider("<backend name>")`
(`agl.inference.batch.provider`): `openai`, `gemini`. `provider_class(name)` imports them on
first use, as `agl.backends.get_backend` does for backends."""
