"""Every resolver test gets its own resolver cache and decision folder (never the user's)."""

import pytest


@pytest.fixture(autouse=True)
def _private_resolver_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MAMBA_SSM_CACHE_DIR", str(tmp_path / "resolver-cache"))
    monkeypatch.delenv("MAMBA_SSM_DECISION_DIR", raising=False)
    monkeypatch.delenv("MAMBA_WHEEL_INDEX", raising=False)
