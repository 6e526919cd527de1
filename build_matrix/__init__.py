"""Release and install tooling for mamba_ssm (lives in the repository and the sdist, never in a wheel).

``python -m build_matrix plan|build|audit|emit|sdist-check`` (this package's cli.py) and the
resolver's ``index|resolve|mirror`` (build_matrix/resolver_cli.py).  The single source of truth is
``build_matrix/matrix.toml``; PyTorch's published builds are in ``build_matrix/data/torch_builds.toml``.
"""
