"""The event stream: schema, header and sample writers, recorder, reader and its checks, state reducer,
control protocol and Perfetto export. The engine writes it, the dashboard reads it (its seek index is
tui/index.py); this package imports only engine.config."""
