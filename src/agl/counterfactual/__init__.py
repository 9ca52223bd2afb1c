"""Counterfactual listening: audio interventions, paired effects, the report section."""
