"""The ``connscale`` command line: one module per sub-command, dispatched by :mod:`.main`."""
