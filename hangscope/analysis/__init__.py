"""From the evidence model to a verdict: correlation, wait graph, detectors."""
