"""Retry limits and reply caps shared by agl's HTTP clients (the dataset downloader and the
inference runner).

One definition, so that params.yaml, the CLI's help text and the clients agree on them.
"""

# The longest server `Retry-After` honoured by default, in seconds. A server asking for more
# (`Retry-After: 86400`) does not stall a run: the downloader waits this long at most, the
# inference runner fails the clip with the server's request named (a rerun retries it).
RETRY_AFTER_CAP_S = 120.0

# The largest model reply read (bytes of its body, after decoding; params.yaml
# infer.max_reply_bytes, `agl infer --max-reply-bytes`). A reply is a few kilobytes; one with
# long reasoning some tens. A bigger body (a gzip bomb, a proxy's 50 MB page) is refused
# while it streams, and the request retried: it is never stored.
MAX_REPLY_BYTES = 1_000_000
# The largest batch job status or result file read (infer.max_batch_bytes): one carries every
# answer of a job (agl.inference.batch), so its cap is the job's, not one reply's.
MAX_BATCH_BYTES = 1_000_000_000
