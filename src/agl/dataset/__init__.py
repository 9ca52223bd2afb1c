"""The data phase: the manifest, downloading and pinning clips, the demo set, published sources."""
