"""The experiment harness: train arms from a spec on equal terms, evaluate them, and report.

`spec` reads what is compared, `harness` trains and evaluates each run, `report_summary` reads
the runs back into one summary, and `report` writes its tables and plots. It uses
`formers.bench` for plots and timing; `formers.bench` never imports it.
"""
