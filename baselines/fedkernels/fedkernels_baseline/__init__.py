"""fedkernels' paper presets as a Flower App (Flower Baselines layout)."""
