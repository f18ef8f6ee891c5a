"""The ``spherepde`` command line: one module per subcommand, the entry point in :mod:`.main`.

The CLI only turns options into configurations and library calls, and results into
one-line messages and exit statuses: 0 success, 1 a run failed, 2 bad input (nothing
written), 130 interrupted.
"""
