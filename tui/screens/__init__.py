"""The dashboard's screens: the main dashboard, compare mode and help."""
