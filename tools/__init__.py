"""Repository tools (not shipped): ci/ (the checks .ci/run runs), gpu/ (make gpu-check), dev/ (build, bench, docs)."""
