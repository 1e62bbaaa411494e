"""clustertop engine: scenarios, catalogs, the cost model and the simulated cluster.

Importing this package does not import SimPy or Textual; the modules that need SimPy import it themselves.
"""
