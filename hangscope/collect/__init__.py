"""Live collectors: one module per source (process state, logs, flight recorder, ...).

Each returns values and notes; none prints, and one failing rank never stops the others.
"""
