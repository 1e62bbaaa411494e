"""clustertop: see how a large AI cluster really behaves. The command line lives in clustertop.cli."""

__version__ = "0.1.0"
