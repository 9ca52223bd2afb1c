"""The HTML report: build, breakdowns, plots, the judges' error modes, and its sections (`sections/`)."""
