"""Anomaly detection on tabular rows: encoding, fitting, scoring, safe persistence, streaming."""
