"""The run report: episode records stored with a run, and ``llmgym report``'s self-contained HTML file.

* :mod:`llmgym.report.records`: what an evaluation records of its episodes (``episodes.jsonl``).
* :mod:`llmgym.report.runs`: the run directories and sweep folders a report reads.
* :mod:`llmgym.report.svg`: inline SVG charts.
* :mod:`llmgym.report.figures`: the learning-curve PNG of a run or a sweep (matplotlib).
* :mod:`llmgym.report.html`: the HTML file (assets in ``llmgym/report/assets``).
"""
