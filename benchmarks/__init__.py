"""Side-by-side benchmarks. `python -m benchmarks [name ...]` runs them; results go to results/."""
