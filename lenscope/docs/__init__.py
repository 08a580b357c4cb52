"""The documentation's numbers, rendered: every table about the study or a benchmark in ``README.md`` and ``docs/``
sits between markers that :mod:`lenscope.docs.regions` fills from ``data/results`` and ``data/benchmarks``
(:mod:`lenscope.docs.blocks`), so a number is typed once, by the run that measured it."""
