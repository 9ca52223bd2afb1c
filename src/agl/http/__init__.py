"""Bounded HTTP: every read agl makes of a server (a download, the crawl, a model's reply).

A wing of its own, so that a stage that never speaks HTTP does not declare it: `client` has
the clients and the streaming read, `bounds` the rules without a transport (no httpx import),
`transport` the transports for either httpx family. This `__init__` imports nothing.
"""
