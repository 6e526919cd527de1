"""Upstream's ``mamba_ssm.utils.torch``: ``custom_fwd`` / ``custom_bwd``, the autocast decorators of a
``torch.autograd.Function``'s forward and backward, working across torch versions.

torch >= 2.4 has ``torch.amp.custom_fwd`` / ``custom_bwd``, which need ``device_type``; older torch has
``torch.cuda.amp.custom_fwd`` / ``custom_bwd`` (CUDA only, deprecated since). The decorators here take the
older call forms (``@custom_fwd``, ``@custom_fwd(cast_inputs=torch.float16)``) and pass
``device_type="cuda"`` to the newer ones, as upstream's do (pass ``device_type`` yourself for another
device).
"""

from __future__ import annotations

from typing import Any, Callable

import torch

__all__ = ["custom_amp_decorator", "custom_bwd", "custom_fwd", "deprecated"]


def custom_amp_decorator(dec: Callable[..., Any], cuda_amp_deprecated: bool) -> Callable[..., Any]:
    """Wrap ``dec`` (an autocast decorator) so that, when ``cuda_amp_deprecated`` (``dec`` is torch.amp's,
    which needs a device type), ``device_type="cuda"`` is passed unless the caller gives one."""

    def decorator(*args: Any, **kwargs: Any) -> Any:
        if cuda_amp_deprecated:
            kwargs.setdefault("device_type", "cuda")
        return dec(*args, **kwargs)

    return decorator


_NEW_AMP = hasattr(torch.amp, "custom_fwd")
# A decorator used bare (``@custom_fwd``) or called with keywords: what it returns depends on the form.
_fwd: Callable[..., Any]
_bwd: Callable[..., Any]
if _NEW_AMP:
    _fwd, _bwd = torch.amp.custom_fwd, torch.amp.custom_bwd
else:  # torch < 2.4
    _fwd, _bwd = torch.cuda.amp.custom_fwd, torch.cuda.amp.custom_bwd

#: Whether torch.cuda.amp's decorators are deprecated here (torch.amp's are used, with device_type="cuda").
deprecated = _NEW_AMP
#: ``@custom_fwd`` / ``@custom_fwd(cast_inputs=dtype)`` on a Function's forward.
custom_fwd = custom_amp_decorator(_fwd, _NEW_AMP)
#: ``@custom_bwd`` on a Function's backward.
custom_bwd = custom_amp_decorator(_bwd, _NEW_AMP)
