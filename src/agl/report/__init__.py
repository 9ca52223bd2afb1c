"""The HTML report: build, breakdowns, plots, error modes, the birds section."""
