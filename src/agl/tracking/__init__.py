"""The pipeline's MLflow runs, logged in one process by the track stage (`track_pipeline`)."""
