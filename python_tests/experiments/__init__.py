"""The fedkernels command and the experiment runner: CLI, presets, registry and the papers' protocol."""
