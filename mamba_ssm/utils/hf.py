"""Reading a checkpoint's config.json and weights from a local directory or the Hugging Face Hub
(upstream's ``mamba_ssm.utils.hf.load_config_hf`` / ``load_state_dict_hf``).

A local directory is always read directly. Any other name is a hub repository id, fetched through
``huggingface_hub.hf_hub_download`` when that package is installed; it honours ``HF_HUB_OFFLINE=1``
(then only its cache is read) and ``HF_HOME`` / ``HF_HUB_CACHE``. Weights are ``model.safetensors``
(preferred when present; needs the ``safetensors`` package) or ``pytorch_model.bin`` (read with
``torch.load(weights_only=True)``, which runs no pickled code). transformers is never needed.
"""

from __future__ import annotations

import json
import os

__all__ = ["CONFIG_NAME", "SAFE_WEIGHTS_NAME", "WEIGHTS_NAME", "load_config_hf", "load_state_dict_hf"]

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "pytorch_model.bin"
SAFE_WEIGHTS_NAME = "model.safetensors"


def _hub_file(model_name, filename, required=True):
    """The local path of ``filename`` of hub repo ``model_name`` (downloaded or from the cache), or None
    when it does not exist there and ``required`` is False."""
    try:
        from huggingface_hub import hf_hub_download
        from huggingface_hub.utils import EntryNotFoundError, LocalEntryNotFoundError
    except ImportError:
        raise FileNotFoundError(
            f"{model_name!r} is not a local directory, and reading it from the Hugging Face Hub needs the "
            f"huggingface_hub package: pip install huggingface_hub (or pass the directory that holds "
            f"{CONFIG_NAME} and the weights)"
        ) from None
    try:
        return hf_hub_download(repo_id=model_name, filename=filename)
    except LocalEntryNotFoundError as exc:
        if not required:
            return None
        raise FileNotFoundError(
            f"{filename} of {model_name!r} is not in the Hugging Face cache and the hub cannot be reached "
            f"({exc.__class__.__name__}; HF_HUB_OFFLINE={os.environ.get('HF_HUB_OFFLINE', 'unset')}): download "
            f"it once while online, or pass a local directory"
        ) from None
    except EntryNotFoundError:
        if not required:
            return None
        raise FileNotFoundError(f"{model_name!r} on the Hugging Face Hub has no {filename}") from None
    except Exception as exc:  # noqa: BLE001  (repository not found, network, auth: all named)
        raise FileNotFoundError(
            f"could not fetch {filename} of {model_name!r} from the Hugging Face Hub: "
            f"{exc.__class__.__name__}: {exc}"
        ) from None


def _resolve(model_name, filename, required=True):
    if os.path.isdir(model_name):
        path = os.path.join(model_name, filename)
        if os.path.isfile(path):
            return path
        if not required:
            return None
        raise FileNotFoundError(
            f"{path} does not exist: a checkpoint directory needs {CONFIG_NAME} and "
            f"{WEIGHTS_NAME} (or {SAFE_WEIGHTS_NAME})"
        )
    if os.path.exists(model_name) or model_name.startswith((".", "/", "~")):
        raise FileNotFoundError(
            f"{model_name!r} is not a directory: pass the directory that holds "
            f"{CONFIG_NAME} and the weights, or a hub repository id such as 'org/name'"
        )
    return _hub_file(model_name, filename, required)


def load_config_hf(model_name):
    """The parsed config.json of ``model_name`` (a local directory or a hub repo id) as a dict.

    Raises:
        FileNotFoundError: no config.json (path named), or a hub name without huggingface_hub.
        ValueError: config.json is not valid JSON (file and position named).
    """
    path = _resolve(model_name, CONFIG_NAME)
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"{path} is not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}); "
            f"re-save the checkpoint (save_pretrained writes it)"
        ) from None


def _load_weights(path, safe):
    import torch

    if safe:
        try:
            from safetensors.torch import load_file
        except ImportError:
            raise FileNotFoundError(
                f"reading {path} needs the safetensors package: pip install safetensors"
            ) from None
        try:
            return load_file(path, device="cpu")
        except Exception as exc:  # noqa: BLE001  (safetensors raises its own error types)
            raise ValueError(
                f"{path} is not a readable safetensors file ({exc.__class__.__name__}: {exc})"
            ) from None
    try:
        state_dict = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001  (unpickling errors of many kinds)
        raise ValueError(
            f"{path} is not a readable PyTorch checkpoint ({exc.__class__.__name__}: {exc}); "
            f"re-save it with torch.save(model.state_dict(), path)"
        ) from None
    if not isinstance(state_dict, dict):
        raise ValueError(f"{path} holds a {type(state_dict).__name__}, not a state_dict (a dict of tensors)")
    return state_dict


def load_state_dict_hf(model_name, device=None, dtype=None):
    """The state_dict of ``model_name`` (a local directory or a hub repo id): ``model.safetensors`` when
    present, else ``pytorch_model.bin``; floating tensors cast to ``dtype`` when given, all moved to
    ``device`` when given.

    Raises:
        FileNotFoundError: neither weights file exists (both named), or a missing package is needed.
        ValueError: the weights file is corrupt or not a state_dict.
    """
    safe_path = _resolve(model_name, SAFE_WEIGHTS_NAME, required=False)
    if safe_path is not None:
        state_dict = _load_weights(safe_path, safe=True)
    else:
        path = _resolve(model_name, WEIGHTS_NAME, required=False)
        if path is None:
            where = model_name if os.path.isdir(model_name) else f"hub repository {model_name!r}"
            raise FileNotFoundError(
                f"{where} has neither {SAFE_WEIGHTS_NAME} nor {WEIGHTS_NAME}: no weights to load"
            )
        state_dict = _load_weights(path, safe=False)
    if dtype is not None:
        state_dict = {k: v.to(dtype) if v.is_floating_point() else v for k, v in state_dict.items()}
    if device is not None:
        state_dict = {k: v.to(device) for k, v in state_dict.items()}
    return state_dict
