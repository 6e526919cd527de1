"""fetch_wheel in a process of its own: the concurrent-install and the file-size-limit tests' child.

Run as ``python tests/install/progs/fetch_wheel_child.py REPO URL FILENAME SHA256 SIZE CACHE
[--settings CONNECT,READ,RETRIES,BACKOFF] [--fsize-limit BYTES]`` (``REPO``: the checkout whose mamba_ssm
to use; the settings default to 2,5,0,0.01). With ``--fsize-limit`` a write past BYTES fails with EFBIG
(SIGXFSZ ignored). Prints the fetched wheel's path, or ``KIND=<kind> TRANSIENT=<bool> MSG=<message>`` of
the FetchError and exits 1.
"""

import argparse
import resource
import signal
import sys

parser = argparse.ArgumentParser()
parser.add_argument("repo")
parser.add_argument("url")
parser.add_argument("filename")
parser.add_argument("sha256")
parser.add_argument("size", type=int)
parser.add_argument("cache")
parser.add_argument("--settings", default="2,5,0,0.01")
parser.add_argument("--fsize-limit", type=int)
args = parser.parse_args()
sys.path.insert(0, args.repo)

from mamba_ssm._install.fetch import FetchError, HttpSettings, fetch_wheel  # noqa: E402

connect, read, retries, backoff = args.settings.split(",")
settings = HttpSettings(float(connect), float(read), int(retries), float(backoff))
if args.fsize_limit is not None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (args.fsize_limit, args.fsize_limit))
try:
    path = fetch_wheel(args.url, args.filename, args.sha256, args.size, cache=args.cache, settings=settings)
except FetchError as exc:
    print(f"KIND={exc.kind} TRANSIENT={exc.transient} MSG={exc}")
    sys.exit(1)
print(path)
