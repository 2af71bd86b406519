"""Helper programs and process control for the collector tests (discover, proc, logs, FR)."""
