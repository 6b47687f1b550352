"""Edge-vector index helpers, re-exported from :mod:`connscale._triu`.

The index arithmetic lives below the capabilities (every capability and
``io`` use it); this module keeps ``connscale.fc.triu`` for users.
"""

from connscale._triu import *  # noqa: F403 (the public names of connscale._triu)
from connscale._triu import __all__  # noqa: F401
