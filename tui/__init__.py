"""clustertop dashboard (Textual). Never imports SimPy."""
