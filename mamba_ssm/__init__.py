"""Mamba's selective state-space model: selective-scan ops, the Mamba block, and their backends.

``import mamba_ssm`` never fails and does nothing expensive: it imports neither torch nor the compiled
module ``mamba_ssm._C``, and so never initialises CUDA (safe before forking DataLoader workers). The
public names below are resolved lazily on first access:

* ``selective_scan_fn``, ``mamba_inner_fn``: :mod:`mamba_ssm.ops.selective_scan_interface`
* ``Mamba``: :mod:`mamba_ssm.modules.mamba_simple`
* ``Mamba2``: :mod:`mamba_ssm.modules.mamba2`; ``Mamba3``: :mod:`mamba_ssm.modules.mamba3`;
  ``MambaLMHeadModel``:
  :mod:`mamba_ssm.models.mixer_seq_simple` (where those modules exist)
* ``set_backend``, ``get_backend``: :mod:`mamba_ssm._dispatch` (``"auto"``, ``"compiled"``,
  ``"torch"``, ``"ref"``; see also ``MAMBA_SSM_BACKEND``)

A name this version lacks raises an error that says so (and what to use instead, for the names in
``_NOT_YET``): ImportError for ``from mamba_ssm import X``, AttributeError for ``mamba_ssm.X`` (so
``hasattr`` stays False).

``python -m mamba_ssm doctor`` reports which backend runs where, and why.
"""

from typing import TYPE_CHECKING, Any

from mamba_ssm._version import __version__

if TYPE_CHECKING:  # the lazy names' real types, for type checkers (nothing here is imported at run time)
    from mamba_ssm._dispatch import get_backend as get_backend
    from mamba_ssm._dispatch import set_backend as set_backend
    from mamba_ssm.models.mixer_seq_simple import MambaLMHeadModel as MambaLMHeadModel
    from mamba_ssm.modules.mamba2 import Mamba2 as Mamba2
    from mamba_ssm.modules.mamba3 import Mamba3 as Mamba3
    from mamba_ssm.modules.mamba_simple import Mamba as Mamba
    from mamba_ssm.ops.selective_scan_interface import mamba_inner_fn as mamba_inner_fn
    from mamba_ssm.ops.selective_scan_interface import selective_scan_fn as selective_scan_fn

# name -> (module, attribute)
_LAZY = {
    "selective_scan_fn": ("mamba_ssm.ops.selective_scan_interface", "selective_scan_fn"),
    "mamba_inner_fn": ("mamba_ssm.ops.selective_scan_interface", "mamba_inner_fn"),
    "Mamba": ("mamba_ssm.modules.mamba_simple", "Mamba"),
    "Mamba2": ("mamba_ssm.modules.mamba2", "Mamba2"),
    "Mamba3": ("mamba_ssm.modules.mamba3", "Mamba3"),
    "MambaLMHeadModel": ("mamba_ssm.models.mixer_seq_simple", "MambaLMHeadModel"),
    "set_backend": ("mamba_ssm._dispatch", "set_backend"),
    "get_backend": ("mamba_ssm._dispatch", "get_backend"),
}

__all__ = ["__version__", *_LAZY]  # noqa: PLE0604 - _LAZY's keys are the lazily resolved names

# Names upstream mamba-ssm exports (or documents) that this version does not have, with what to use.
_NOT_YET: dict[str, str] = {}


def _missing(name: str, why: str) -> ImportError | AttributeError:
    """The error for a name this version lacks: ImportError for ``from mamba_ssm import name`` (whose
    generic message would otherwise replace ours), AttributeError for attribute access, so
    ``hasattr``/``getattr(mamba_ssm, name, default)`` keep working."""
    message = f"module 'mamba_ssm' has no attribute {name!r}: {why}"
    import sys

    try:
        import dis

        frame = sys._getframe(2)
        from_import = frame.f_code.co_code[frame.f_lasti] == dis.opmap["IMPORT_FROM"]
    except (ValueError, IndexError, KeyError, AttributeError):  # an unusual interpreter: plain access
        from_import = False
    if from_import:
        return ImportError(
            f"cannot import name {name!r} from 'mamba_ssm' ({__file__}): {why}",
            name="mamba_ssm",
            path=__file__,
        )
    try:
        return AttributeError(message, name=name, obj=sys.modules[__name__])
    except TypeError:  # Python < 3.10: no name/obj keywords
        return AttributeError(message)


def __getattr__(name: str) -> Any:
    """Resolve a public name on first access (PEP 562) and cache it in the module.

    Returns the object (a function or an nn.Module class, per ``_LAZY``); its type depends on ``name``.
    """
    try:
        module_name, attribute = _LAZY[name]
    except KeyError:
        if name.startswith("__"):
            raise AttributeError(f"module 'mamba_ssm' has no attribute {name!r}") from None
        why = _NOT_YET.get(name) or (
            f"mamba-ssm {__version__} does not define it (its public names: {', '.join(sorted(_LAZY))})"
        )
        raise _missing(name, why) from None
    import importlib

    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            # The module itself is not part of this version: an absent attribute, not a broken install.
            raise _missing(name, f"{module_name} is not part of mamba-ssm {__version__}") from None
        raise  # e.g. torch is missing: say so
    value = getattr(module, attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The module's names and the lazily resolved ones (PEP 562)."""
    return sorted(set(globals()) | set(_LAZY))
