"""The package's version, derived from the git tags by setuptools-scm.

Building or installing the package (``pip install``, ``python -m build``)
writes it into ``_scm_version.py`` from ``git describe`` (the tag ``v0.2.0``
gives ``0.2.0``, a commit after it ``0.2.1.devN+g<hash>``). A source tree
that was never built has no such file and reports ``0+unknown``.
"""

try:
    from connscale._scm_version import __version__
except ImportError:  # a source tree run in place, never built
    __version__ = "0+unknown"
