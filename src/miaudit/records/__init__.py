"""Run records: the typed results of an audit, read by the report and the Python API."""
