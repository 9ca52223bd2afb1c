#!/usr/bin/env bash
# The benchmark on this machine's Ray (docs/cluster.md, "A laptop"): a local Ray instance
# sized to the machine, the pipeline as usual. Nothing else to install but the extra:
#   pip install -e ".[ray]"
set -euo pipefail
cd "$(dirname "$0")/../.."

# One model by hand, 8 shards on a local Ray (started for the run, stopped after it):
agl infer --entry knn --manifest data/manifest.csv --audio-root data/audio \
  --out build/scratch/knn-ray --executor ray --ray-shards 8

# The whole pipeline with every infer and listen stage on Ray. The executor is transport:
# no stage declares it, so nothing re-runs because of it and dvc.lock stays as it is.
AGL_EXECUTOR=ray dvc repro
