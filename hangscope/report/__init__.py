"""Renderings of one verdict: terminal text, JSON (``Verdict.to_json``) and the HTML report."""
