"""The paper stage's one call: fetch the authors' published predictions (pinned, bounded),
import them with their fields verbatim, and score each under the paper protocol."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agl.core.workspace import shared_path
from agl.dataset.paper import fetch, resolve, run_source
from agl.dataset.sources import SourceConfig
from agl.errors import AglError
from agl.predictions.importer import import_with_report
from agl.predictions.records import write_predictions
from agl.scoring.config import EvaluateConfig
from agl.scoring.evaluate import evaluate_run
from agl.scoring.text import count_text

HEADLINE = ("n", "distance_error_km", "continent_acc", "country_acc", "city_acc")


def reproduce_paper(cfg: dict[str, Any], evaluation: EvaluateConfig, out: Path) -> dict[str, Any]:
    """params.yaml `paper:` (`cfg`): every run of `paper.runs` into `out/<run>/`; returns the
    summary (each run's headline metrics, or a note that no run is selected)."""
    out.mkdir(parents=True, exist_ok=True)
    runs = cfg.get("runs") or []
    if not isinstance(runs, list):  # text would be read letter by letter
        raise AglError(f"params.yaml paper.runs: {runs!r} is not a list of runs; e.g. "
                       "paper.runs: [{published: qwen25-omni}], or [] for none")
    summary: dict[str, Any] = {"base_url": cfg["base_url"], "runs": {}}
    if not runs:
        summary["note"] = "no published runs selected (params.yaml paper.runs is empty)"
        print("paper: no published runs selected; set paper.runs in params.yaml to reproduce")
        return summary
    cache = shared_path(cfg.get("cache_dir", "cache/paper"))
    # Files pinned by SHA-256 (the manifest, paper.published entries) are checked;
    # every read is bounded by paper.timeout_s / deadline_s / max_bytes / redirect_hosts.
    sources_cfg = SourceConfig.from_params({"paper": cfg})
    pins, limits = sources_cfg.pinned(), sources_cfg.limits()
    # Every entry is checked before anything is downloaded: a typo fails at once.
    sources = [(item, *run_source(item, cfg.get("published") or {})) for item in runs]
    url = resolve(cfg["base_url"], cfg["manifest"])
    manifest = fetch(url, cache, sha256=pins.get(url), limits=limits,
                     url_from="paper.base_url and paper.manifest in params.yaml",
                     sha256_from="the pinned SHA-256 of the AGL1K manifest")
    for item, name, path in sources:
        url = resolve(cfg["base_url"], path)
        src = fetch(url, cache, sha256=pins.get(url), limits=limits,
                    url_from=f"paper.base_url and paper.runs ({name}) in params.yaml",
                    sha256_from=f"paper.published.{item.get('published', name)}.sha256 in params.yaml")
        out_dir = out / name
        # The import keeps the authors' fields verbatim (`original`), so scoring the
        # converted file is scoring theirs; the report's judges read it from here.
        predictions, report = import_with_report(src)
        write_predictions(out_dir / "predictions.jsonl", predictions)
        print(f"paper/{name}: {report.line()}")
        doc = evaluate_run(
            f"paper/{name}", out_dir / "predictions.jsonl", manifest, out_dir, evaluation,
            info={"model": item.get("model", name), "backend": "replay", "source": "published",
                  "paper_name": item.get("model", name), "published_path": path},
        )
        res = doc["protocols"]["paper"]
        summary["runs"][name] = {k: res[k] for k in HEADLINE}
        print(f"paper/{name}: mean {res['distance_error_km']:.2f} km, continent "
              f"{res['continent_acc']:.2f}, country {res['country_acc']:.2f}, city {res['city_acc']:.2f}; "
              f"{count_text(res)}")
    return summary
