"""`agl exp`: DVC's experiments in 120 columns. The document has the shape DVC 3.67 writes
(`dvc.repo.experiments.serialize`: ExpState/ExpRange); the real command's output after a
queued sweep is checked in test_team_setup's sweep."""

from __future__ import annotations

import json

import pytest

from agl.cli import main
from agl.report.experiments import changed_params, rows_from_dvc, short_names, table

RUNS = ["gemini-2.5-flash", "gpt-4o-audio", "knn", "langprior", "prior", "qwen2.5-omni-7b", "random",
        "random-sphere", "kimi-audio", "minicpm-o-2.6"]


def _exp(rev, name, gamma, seed, km0, error=None):
    params = {"params.yaml": {"data": {"localizability": {"gamma_km": gamma, "theta": 0.0},
                                       "evaluate": {"seed": seed, "metric_bootstrap": 1000},
                                       "models": {r: {"backend": "x"} for r in RUNS}}}}
    metrics = {f"metrics/runs/{r}.json": {"data": {r: {"mean_km": km0 + 111.1 * i, "country_acc": 0.25,
                                                        "median_km": km0}}}
               for i, r in enumerate(RUNS)}
    metrics["metrics/curation/localizability.json"] = {"data": {"localize": {"selected": 10 + seed}}}
    data = None if error else {"rev": rev, "timestamp": None, "params": params, "metrics": metrics,
                               "deps": {}, "outs": {}, "meta": {"has_checkpoints": False}}
    return {"rev": rev, "name": name, "data": data, "error": error, "experiments": None}


def _doc():
    base = _exp("a" * 40, "main", 5000.0, 0, 8401.107)
    base["experiments"] = [
        {"revs": [_exp(f"{i}" * 40, f"exp-{i}{i}{i}{i}a", g, 0, 8401.107 + i)], "executor": None,
         "name": f"exp-{i}{i}{i}{i}a"} for i, g in ((1, 2500.0), (2, 7500.0), (3, 10000.0))]
    base["experiments"].append({"revs": [_exp("4" * 40, "exp-broken", 1.0, 0, 0.0,
                                              error={"msg": "stage localize failed", "type": ""})],
                                "executor": {"state": "failed"}, "name": "exp-broken"})
    return [_exp("workspace", None, 5000.0, 0, 8401.107), base]


def test_rows_params_that_differ_and_short_names():
    rows = rows_from_dvc(_doc())
    assert [r.name for r in rows] == ["workspace", "main", "exp-1111a", "exp-2222a", "exp-3333a", "exp-broken"]
    assert changed_params(rows) == ["localizability.gamma_km"]  # the sweep's knob, not the 40 others
    assert rows[-1].error == "stage localize failed" and not rows[-1].metrics
    assert short_names(["a.x.seed", "b.seed", "c.gamma"]) == {"a.x.seed": "x.seed", "b.seed": "b.seed",
                                                               "c.gamma": "gamma"}


def test_the_compact_table_fits_120_columns_and_names_what_it_left_out():
    out = table(rows_from_dvc(_doc()), "mean_km", 120).text()
    lines = out.splitlines()
    assert max(map(len, lines)) <= 120, out
    assert lines[0].split()[:3] == ["experiment", "gamma_km", "gemini-2.5-flash"]
    assert "…" not in "\n".join(lines[:-1])  # every shown cell whole
    assert lines[-1].startswith("(") and "--wide" in lines[-1]  # ten runs do not all fit
    row = next(line for line in lines if line.startswith("exp-2222a"))
    assert row.split()[1:3] == ["7,500.0", "8,403.1"]
    assert "exp-broken (stage localize failed)" in out


def test_wide_and_json_views(tmp_path, capsys):
    path = tmp_path / "exp.json"
    path.write_text(json.dumps(_doc()))
    assert main(["exp", "--input", str(path), "--wide"]) == 0
    wide = capsys.readouterr().out
    assert "minicpm-o-2.6.country_acc" in wide and "localize.selected" in wide
    assert main(["exp", "--input", str(path), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[2]["params"] == {"localizability.gamma_km": 2500.0}
    assert rows[2]["metrics"]["knn.mean_km"] == pytest.approx(8401.107 + 1 + 2 * 111.1)
    assert main(["exp", "--input", str(path), "--metric", "country_acc"]) == 0
    assert "0.25" in capsys.readouterr().out


def test_bad_input_is_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["exp", "--input", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--input" in err[0] and "dvc exp show --json" in err[0]


def test_a_document_of_the_wrong_shape_is_one_line(tmp_path, capsys):
    bad = tmp_path / "shape.json"
    bad.write_text('[{"rev": "workspace", "data": {"params": 3}}]')
    assert main(["exp", "--input", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not the shape `dvc exp show --json` writes" in err[0], err
