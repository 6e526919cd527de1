"""Reading a checkpoint's config.json and weights from a local directory or the Hugging Face Hub
(upstream's ``mamba_ssm.utils.hf.load_config_hf`` / ``load_state_dict_hf``, plus every weights layout
transformers and huggingface_hub write, read shard by shard).

A local directory is always read directly. Any other name is a hub repository id, fetched through
``huggingface_hub`` when that package is installed; it honours ``HF_HUB_OFFLINE=1`` (then only its cache
is read) and ``HF_HOME`` / ``HF_HUB_CACHE``. transformers is never needed.

Weights layouts, in order of precedence (:data:`WEIGHTS_LAYOUTS`; the first one present is read, and one
warning names the others present, which are ignored):

    model.safetensors                  one safetensors file (needs the ``safetensors`` package)
    model.safetensors.index.json       sharded safetensors: {"weight_map": {key: shard file}}
    pytorch_model.bin                  one ``torch.save`` file
    pytorch_model.bin.index.json       sharded ``torch.save`` files, the same index format

safetensors comes before a pickle (nothing runs while reading it, and its header gives every shape
before any tensor is read), one file before an index (transformers' order). ``.bin`` files are read
with ``torch.load(weights_only=True)``, which runs no pickled code, memory-mapped when their format
allows it (``mmap=True``).

Memory: :func:`iter_weights` yields one tensor at a time; a safetensors file is reopened every
:data:`REOPEN_BYTES` so that the pages it mapped are let go, and a ``.bin`` shard is released before
the next one is opened. A caller that copies each tensor into a model built beforehand
(``MambaLMHeadModel.from_pretrained``) holds the model plus at most one ``.bin`` shard's mapped pages
(file-backed, shared with the page cache) or :data:`REOPEN_BYTES` of a safetensors file, never a second
copy of all the weights.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, overload

if TYPE_CHECKING:
    from types import ModuleType

    import torch
    from safetensors import safe_open
    from torch.types import Device

__all__ = [
    "CONFIG_NAME",
    "SAFE_WEIGHTS_INDEX_NAME",
    "SAFE_WEIGHTS_NAME",
    "WEIGHTS_INDEX_NAME",
    "WEIGHTS_LAYOUTS",
    "WEIGHTS_NAME",
    "WeightFiles",
    "find_weights",
    "iter_weights",
    "load_config_hf",
    "load_state_dict_hf",
    "weight_shapes",
]

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "pytorch_model.bin"
SAFE_WEIGHTS_NAME = "model.safetensors"
WEIGHTS_INDEX_NAME = "pytorch_model.bin.index.json"
SAFE_WEIGHTS_INDEX_NAME = "model.safetensors.index.json"
#: The weights layouts in order of precedence (module docstring).
WEIGHTS_LAYOUTS = (SAFE_WEIGHTS_NAME, SAFE_WEIGHTS_INDEX_NAME, WEIGHTS_NAME, WEIGHTS_INDEX_NAME)
#: Bytes read from one opening of a safetensors file before it is closed and reopened.
REOPEN_BYTES = 64 << 20


def _hub(model_name: str) -> ModuleType:
    """The huggingface_hub module, or FileNotFoundError saying that hub name ``model_name`` needs it."""
    try:
        import huggingface_hub
    except ImportError:
        raise FileNotFoundError(
            f"{model_name!r} is not a local directory, and reading it from the Hugging Face Hub needs the "
            f"huggingface_hub package: pip install huggingface_hub (or pass the directory that holds "
            f"{CONFIG_NAME} and the weights)"
        ) from None
    return huggingface_hub


@overload
def _hub_file(model_name: str, filename: str, required: Literal[True] = ...) -> str: ...
@overload
def _hub_file(model_name: str, filename: str, required: bool) -> str | None: ...
def _hub_file(model_name: str, filename: str, required: bool = True) -> str | None:
    """The local path of ``filename`` of hub repo ``model_name`` (downloaded or from the cache), or None
    when it does not exist there and ``required`` is False."""
    hub = _hub(model_name)
    # Public in huggingface_hub.utils (resolved lazily); its TYPE_CHECKING imports of them lack the
    # re-export form, so strict mypy reads them as private.
    from huggingface_hub.utils import (  # type: ignore[attr-defined]
        EntryNotFoundError,
        LocalEntryNotFoundError,
    )

    try:
        path: str = hub.hf_hub_download(repo_id=model_name, filename=filename)
        return path
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


def _is_local(model_name: str | os.PathLike[str]) -> bool:
    """True for a local directory; FileNotFoundError for a path that is not one; False for a hub id."""
    model_name = os.fspath(model_name)
    if os.path.isdir(model_name):
        return True
    if os.path.exists(model_name) or model_name.startswith((".", "/", "~")):
        raise FileNotFoundError(
            f"{model_name!r} is not a directory: pass the directory that holds "
            f"{CONFIG_NAME} and the weights, or a hub repository id such as 'org/name'"
        )
    return False


@overload
def _resolve(model_name: str, filename: str, required: Literal[True] = ...) -> str: ...
@overload
def _resolve(model_name: str, filename: str, required: bool) -> str | None: ...
def _resolve(model_name: str, filename: str, required: bool = True) -> str | None:
    """The local path of ``filename`` of ``model_name`` (a directory or a hub id); None when absent and
    not ``required``, else FileNotFoundError naming it."""
    if _is_local(model_name):
        path = os.path.join(model_name, filename)
        if os.path.isfile(path):
            return path
        if not required:
            return None
        raise FileNotFoundError(
            f"{path} does not exist: a checkpoint directory needs {CONFIG_NAME} and one of the weights "
            f"layouts {', '.join(WEIGHTS_LAYOUTS)}"
        )
    return _hub_file(model_name, filename, required)


def _json_floats(obj: dict[str, Any]) -> Any:
    """transformers (>= 5) writes non-finite floats as {"__float__": "Infinity"}: read them as floats."""
    if set(obj) == {"__float__"} and isinstance(obj["__float__"], str):
        try:
            return float(obj["__float__"])
        except ValueError:
            return obj
    return obj


def _read_json(path: str, what: str) -> Any:
    """The parsed JSON file at ``path``; ValueError naming the file, the position and ``what`` writes it."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f, object_hook=_json_floats)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"{path} is not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}); "
            f"re-save the checkpoint ({what})"
        ) from None


def load_config_hf(model_name: str | os.PathLike[str]) -> dict[str, Any]:
    """The parsed config.json of ``model_name`` (a local directory or a hub repo id) as a dict
    (transformers' ``{"__float__": "Infinity"}`` read as ``float("inf")``).

    Raises:
        FileNotFoundError: no config.json (path named), or a hub name without huggingface_hub.
        ValueError: config.json is not valid JSON (file and position named).
    """
    config: dict[str, Any] = _read_json(
        _resolve(os.fspath(model_name), CONFIG_NAME), "save_pretrained writes it"
    )
    return config


@dataclass
class WeightFiles:
    """The weights of one checkpoint, resolved to local files (:func:`find_weights`).

    Attributes:
        source: the directory or hub id they came from (for messages).
        layout: the layout read, one of :data:`WEIGHTS_LAYOUTS`.
        files: local paths of the weights files (one, or the shards in the index's order).
        weight_map: for an index layout, {key: local path of its shard}; None for one file.
        ignored: the other layouts that were present and not read.
    """

    source: str
    layout: str
    files: list[str]
    weight_map: dict[str, str] | None = None
    ignored: tuple[str, ...] = field(default_factory=tuple)

    @property
    def safetensors(self) -> bool:
        """Whether the files are safetensors (else ``torch.save`` files)."""
        return self.layout in (SAFE_WEIGHTS_NAME, SAFE_WEIGHTS_INDEX_NAME)


def _hub_present(model_name: str) -> list[str]:
    """Which of WEIGHTS_LAYOUTS hub repo ``model_name`` has: listed by the hub when it can be reached,
    else what the local cache holds."""
    hub = _hub(model_name)
    from huggingface_hub import constants

    names: set[str] | None = None
    if not constants.HF_HUB_OFFLINE:
        try:
            names = set(hub.HfApi().list_repo_files(model_name))
        except Exception:  # noqa: BLE001  (offline, network, auth: the cache answers instead)
            names = None
    if names is None:
        names = {n for n in WEIGHTS_LAYOUTS if isinstance(hub.try_to_load_from_cache(model_name, n), str)}
    return [n for n in WEIGHTS_LAYOUTS if n in names]


def _weight_map(index_path: str, index: object) -> dict[str, str]:
    """The {tensor name: shard file name} of an index file's JSON; ValueError for a malformed map or a
    name that leaves the checkpoint's folder."""
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise ValueError(
            f"{index_path} has no weight_map (a JSON object {{tensor name: shard file}}): re-save the "
            f"checkpoint (huggingface_hub.save_torch_state_dict or transformers' save_pretrained write it)"
        )
    for key, name in weight_map.items():
        if not isinstance(name, str) or not name or os.path.isabs(name) or ".." in name.split("/"):
            raise ValueError(
                f"{index_path}: weight_map[{key!r}] = {name!r} is not a shard file name next to the index"
            )
    return weight_map


def find_weights(model_name: str | os.PathLike[str], warn: bool = True) -> WeightFiles:
    """Resolve the weights of ``model_name`` (a local directory or a hub repo id) to local files, taking
    the first layout of :data:`WEIGHTS_LAYOUTS` that is present (for a hub repo only that layout's files
    are downloaded).

    Args:
        model_name: a directory or a hub repository id.
        warn: emit one UserWarning naming the layouts present but ignored.

    Raises:
        FileNotFoundError: no layout is present (all four named), a shard named by the index is missing
            (shard and index named), or a hub name without huggingface_hub.
        ValueError: an index file that is not valid JSON or has no usable weight_map.
    """
    model_name = os.fspath(model_name)
    local = _is_local(model_name)
    if local:
        present = [n for n in WEIGHTS_LAYOUTS if os.path.isfile(os.path.join(model_name, n))]
    else:
        present = _hub_present(model_name)
    if not present:
        where = model_name if local else f"hub repository {model_name!r}"
        raise FileNotFoundError(
            f"{where} has no weights: none of {', '.join(WEIGHTS_LAYOUTS)} is there "
            f"(save_pretrained writes {WEIGHTS_NAME}; transformers and huggingface_hub write the others)"
        )
    layout, ignored = present[0], tuple(present[1:])
    if ignored and warn:
        warnings.warn(
            f"{model_name}: loading {layout}; ignoring {', '.join(ignored)} (mamba-ssm reads the first "
            f"present of {', '.join(WEIGHTS_LAYOUTS)}); remove the files you do not want read",
            UserWarning,
            stacklevel=3,
        )
    path = _resolve(model_name, layout)
    if layout in (SAFE_WEIGHTS_NAME, WEIGHTS_NAME):
        return WeightFiles(str(model_name), layout, [path], None, ignored)
    index = _read_json(path, "huggingface_hub.save_torch_state_dict or save_pretrained writes it")
    weight_map = _weight_map(path, index)
    local_paths: dict[str, str] = {}
    for name in dict.fromkeys(weight_map.values()):  # the shards, in first-seen order
        if local:
            shard = os.path.join(model_name, name)
            if not os.path.isfile(shard):
                raise FileNotFoundError(
                    f"{shard} does not exist, but {path} puts {sum(v == name for v in weight_map.values())} "
                    f"tensors there: copy every shard of the checkpoint"
                )
        else:
            shard = _hub_file(model_name, name)
        local_paths[name] = shard
    return WeightFiles(
        str(model_name),
        layout,
        list(local_paths.values()),
        {key: local_paths[name] for key, name in weight_map.items()},
        ignored,
    )


def _safe_open(path: str) -> safe_open:
    """An open safetensors file (CPU, PyTorch tensors); FileNotFoundError without the package,
    ValueError for an unreadable file."""
    try:
        from safetensors import safe_open
    except ImportError:
        raise FileNotFoundError(
            f"reading {path} needs the safetensors package: pip install safetensors"
        ) from None
    try:
        return safe_open(path, framework="pt", device="cpu")
    except Exception as exc:  # noqa: BLE001  (safetensors raises its own error types)
        raise ValueError(
            f"{path} is not a readable safetensors file ({exc.__class__.__name__}: {exc})"
        ) from None


def _load_bin(path: str) -> dict[str, torch.Tensor]:
    """A ``torch.save`` state_dict, memory-mapped when the file's format allows it."""
    import torch

    try:
        try:
            state_dict = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as exc:
            if "mmap" not in str(exc):
                raise
            # the legacy (pre-zip) format cannot be mapped: read it whole
            state_dict = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001  (unpickling errors of many kinds)
        raise ValueError(
            f"{path} is not a readable PyTorch checkpoint ({exc.__class__.__name__}: {exc}); "
            f"re-save it with torch.save(model.state_dict(), path)"
        ) from None
    if not isinstance(state_dict, dict) or not all(isinstance(v, torch.Tensor) for v in state_dict.values()):
        raise ValueError(f"{path} holds a {type(state_dict).__name__}, not a state_dict (a dict of tensors)")
    return state_dict


def _keys_of(weights: WeightFiles, path: str, present: list[str]) -> list[str]:
    """The keys to read from ``path``: all of them for one file; those the index puts there for a shard
    (ValueError when the index names a key the shard does not hold)."""
    if weights.weight_map is None:
        return list(present)
    wanted = [k for k, p in weights.weight_map.items() if p == path]
    have = set(present)
    absent = [k for k in wanted if k not in have]
    if absent:
        raise ValueError(
            f"{path} does not hold {', '.join(absent[:4])}{' ...' if len(absent) > 4 else ''}, which "
            f"{weights.layout} of {weights.source} puts there: the index and the shards are from "
            f"different saves; re-save the checkpoint"
        )
    order = {k: i for i, k in enumerate(present)}
    return sorted(wanted, key=order.__getitem__)


def weight_shapes(weights: WeightFiles) -> dict[str, tuple[int, ...]]:
    """{key: shape} of every tensor of ``weights``, without reading any tensor's data (safetensors
    headers; ``.bin`` files memory-mapped, so only their pickled metadata is read).

    Raises:
        ValueError: an unreadable file, or an index naming a key its shard lacks.
        FileNotFoundError: safetensors files without the safetensors package.
    """
    shapes: dict[str, tuple[int, ...]] = {}
    for path in weights.files:
        if weights.safetensors:
            with _safe_open(path) as f:
                present = list(f.keys())
                for key in _keys_of(weights, path, present):
                    shapes[key] = tuple(f.get_slice(key).get_shape())
        else:
            state_dict = _load_bin(path)
            for key in _keys_of(weights, path, list(state_dict)):
                shapes[key] = tuple(state_dict[key].shape)
            del state_dict
    return shapes


def iter_weights(weights: WeightFiles) -> Iterator[tuple[str, torch.Tensor]]:
    """(key, CPU tensor in the file's dtype) for every tensor of ``weights``, one file after another
    (the memory bound in the module docstring). A yielded tensor may view a memory-mapped file: copy it
    before asking for the next one.

    Raises:
        ValueError / FileNotFoundError: as :func:`weight_shapes`.
    """
    for path in weights.files:
        if weights.safetensors:
            with _safe_open(path) as f:
                present = list(getattr(f, "offset_keys", f.keys)())
                keys = _keys_of(weights, path, present)
                sizes = {
                    k: math.prod(f.get_slice(k).get_shape()) * _DTYPE_BYTES.get(f.get_slice(k).get_dtype(), 8)
                    for k in keys
                }
            group: list[str] = []
            total = 0
            for key in keys:  # groups of about REOPEN_BYTES, each read through its own opening
                group.append(key)
                total += sizes[key]
                if total >= REOPEN_BYTES or key == keys[-1]:
                    with _safe_open(path) as f:
                        for k in group:
                            yield k, f.get_tensor(k)
                    group, total = [], 0
        else:
            state_dict = _load_bin(path)
            for key in _keys_of(weights, path, list(state_dict)):
                yield key, state_dict.pop(key)
            del state_dict


# safetensors dtype names -> bytes per element (the grouping above only needs sizes, not exactness).
_DTYPE_BYTES = {
    "F64": 8,
    "I64": 8,
    "U64": 8,
    "F32": 4,
    "I32": 4,
    "U32": 4,
    "F16": 2,
    "BF16": 2,
    "I16": 2,
    "U16": 2,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "I8": 1,
    "U8": 1,
    "BOOL": 1,
}


def load_state_dict_hf(
    model_name: str | os.PathLike[str], device: Device = None, dtype: torch.dtype | None = None
) -> dict[str, torch.Tensor]:
    """The state_dict of ``model_name`` (a local directory or a hub repo id) in the file's key names,
    from the first weights layout present (:data:`WEIGHTS_LAYOUTS`; sharded ones merged); floating
    tensors cast to ``dtype`` when given, all moved to ``device`` when given. This holds every tensor at
    once; ``MambaLMHeadModel.from_pretrained`` instead copies them into the model one at a time.

    Warns:
        UserWarning: several layouts are present (the ignored ones named).

    Raises:
        FileNotFoundError: no weights layout exists (all named), a shard is missing, or a missing
            package is needed.
        ValueError: a weights file is corrupt or not a state_dict; an index that does not match its
            shards.
    """
    weights = find_weights(model_name)
    state_dict: dict[str, torch.Tensor] = {}
    for key, stored in iter_weights(weights):
        tensor = stored.to(dtype) if dtype is not None and stored.is_floating_point() else stored
        state_dict[key] = tensor.to(device) if device is not None else tensor
    return state_dict
