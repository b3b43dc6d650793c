"""Run records → paper tables, figures and the report page.

``runs`` reads a sweep once into a frame; ``tables`` and ``figures`` declare each paper item on
it beside the published numbers (``topk/paper_results``); ``render`` writes markdown, CSV and
LaTeX; ``speed`` is B18's speed table from the loss benchmark; ``page`` builds the HTML report.
"""
