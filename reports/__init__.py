"""Sample HTML reports rendered from the committed fixtures (``python -m reports.regenerate``)."""
