"""The dashboard's widgets, one per module. Each reads a view (tui/display.py: the ClusterState and what the
display keeps of the past); none changes it."""
