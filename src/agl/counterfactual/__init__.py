"""Counterfactual listening: audio interventions, paired effects (the report's
section is `agl.report.sections.counterfactual`)."""
