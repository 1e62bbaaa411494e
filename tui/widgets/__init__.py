"""The dashboard's widgets, one per module. Each reads a ClusterState; none changes it."""
