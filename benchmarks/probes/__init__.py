"""One-off probes: scripts that answered one question (a profile, a trace, a compiled program read without a GPU).

Kept so that their dated records (docs/records/) can be re-made; what users run to measure the project is one
level up, in benchmarks/ (docs/benchmarks.md). Run them as `PYTHONPATH=. python benchmarks/probes/NAME.py` or
`python -m benchmarks.probes.NAME`.
"""
