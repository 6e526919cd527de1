"""The package version, kept in one place and loadable without importing torch.

setup.py reads this file by path (it never imports ``mamba_ssm``); a local version label from
``MAMBA_LOCAL_VERSION`` is appended at build time, so a wheel's file name and METADATA agree.
"""

__version__ = "2.4.0.dev0"
