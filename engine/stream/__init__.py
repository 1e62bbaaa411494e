"""The event stream: schema, recorder, reader, seek index, state reducer and export. The engine writes it, the
dashboard reads it; this package imports only engine.config."""
