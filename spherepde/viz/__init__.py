"""Pictures: PyVista rendering of densities and tokens on the sphere (:mod:`.render`) and
Matplotlib figures of diagnostics and density maps (:mod:`.plots`; readable axes, ticks
and legends for any figure: :mod:`.figstyle`). PyVista and
Matplotlib are imported only here (and in the CLI), and only when used."""
