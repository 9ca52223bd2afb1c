"""Retry limits shared by agl's HTTP clients (the dataset downloader and the inference runner).

One definition, so that params.yaml, the CLI's help text and both clients agree on it.
"""

# The longest server `Retry-After` honoured by default, in seconds. A server asking for more
# (`Retry-After: 86400`) does not stall a run: the downloader waits this long at most, the
# inference runner fails the clip with the server's request named (a rerun retries it).
RETRY_AFTER_CAP_S = 120.0
