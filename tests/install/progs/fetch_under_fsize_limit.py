"""fetch_wheel with a 64 KiB file-size limit: the write fails with EFBIG, a local error.

Run as ``python tests/install/progs/fetch_under_fsize_limit.py REPO URL FILENAME SHA256 SIZE CACHE``
(``REPO``: the checkout whose mamba_ssm to use); prints ``KIND=<kind> TRANSIENT=<bool> MSG=<message>``
of the FetchError (nothing if the fetch succeeds).
"""

import resource
import signal
import sys

sys.path.insert(0, sys.argv[1])

from mamba_ssm._install.fetch import FetchError, HttpSettings, fetch_wheel

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
resource.setrlimit(resource.RLIMIT_FSIZE, (65536, 65536))
try:
    fetch_wheel(
        sys.argv[2],
        sys.argv[3],
        sys.argv[4],
        int(sys.argv[5]),
        cache=sys.argv[6],
        settings=HttpSettings(2, 2, 3, 0.01),
    )
except FetchError as exc:
    print(f"KIND={exc.kind} TRANSIENT={exc.transient} MSG={exc}")
