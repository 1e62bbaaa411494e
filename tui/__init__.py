"""The Textual dashboard: screens, widgets and the event sources (live engine, file, pipe)."""
