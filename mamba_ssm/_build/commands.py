"""The setuptools side of a build: the ``bdist_wheel`` that hands over a prebuilt wheel (with the
install id added) or builds one, torch's ``BuildExtension`` writing the build-info header first, the
``mamba_ssm._C`` Extension, and the arguments to ``setuptools.setup``. torch is imported only for a
source build (``make_build_ext`` / ``make_extension``).
"""
from __future__ import annotations

import glob
import json
import os
import shutil
import time
import uuid
from typing import Dict

from setuptools import find_packages

try:  # setuptools >= 70.1 ships bdist_wheel
    from setuptools.command.bdist_wheel import bdist_wheel as _bdist_wheel
except ImportError:  # pragma: no cover - older setuptools with the wheel package
    from wheel.bdist_wheel import bdist_wheel as _bdist_wheel

from .._compat import buildinfo
from .config import BuildConfig, git_commit, torch_requirement
from .errors import PreflightError
from .plan import Plan, record_decision
from .settings import CSRC, EXT_NAME, INSTALL_ID_FILE, PACKAGE, ROOT


def write_if_changed(path: str, text: str) -> bool:
    """Write ``text`` to ``path`` (atomically) unless it already holds it; True when written."""
    try:
        with open(path) as f:
            if f.read() == text:
                return False
    except OSError:
        pass
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)
    return True


def add_install_id(src: str, dest: str, install_id: str) -> str:
    """Copy wheel ``src`` to ``dest`` with ``<dist-info>/mamba_ssm_install.json`` (the install id
    doctor matches with the recorded decision) added to its dist-info and RECORD. Every other entry is
    copied byte for byte (the package files stay the index wheel's). Returns ``dest``."""
    import base64
    import hashlib
    import zipfile

    data = (json.dumps({"install_id": install_id}, sort_keys=True) + "\n").encode("utf-8")
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    tmp = dest + ".part"
    try:
        with zipfile.ZipFile(src) as zin, zipfile.ZipFile(tmp, "w") as zout:
            records = [i.filename for i in zin.infolist() if i.filename.count("/") == 1
                       and i.filename.endswith(".dist-info/RECORD")]
            if len(records) != 1:
                raise PreflightError(f"the prebuilt wheel {src} has no single <name>.dist-info/RECORD")
            dist_info = records[0].rsplit("/", 1)[0]
            new_name = f"{dist_info}/{INSTALL_ID_FILE}"
            for info in zin.infolist():
                if info.filename == new_name:
                    continue
                payload = zin.read(info.filename)
                if info.filename == records[0]:
                    lines = [l for l in payload.decode("utf-8").splitlines()
                             if l and not l.startswith(new_name + ",")]
                    lines.insert(max(0, len(lines) - 1) if lines and lines[-1].startswith(records[0] + ",")
                                 else len(lines), f"{new_name},sha256={digest},{len(data)}")
                    payload = ("\n".join(lines) + "\n").encode("utf-8")
                    extra = zipfile.ZipInfo(new_name, info.date_time)
                    extra.compress_type, extra.external_attr = zipfile.ZIP_DEFLATED, 0o644 << 16
                    zout.writestr(extra, data)
                zout.writestr(info, payload)
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return dest


def make_cmdclass(plan: Plan) -> Dict[str, type]:
    """The setuptools command classes for ``plan``."""
    cmdclass: Dict[str, type] = {}

    class bdist_wheel(_bdist_wheel):
        def finalize_options(self):
            if plan.mode == "source":
                self.py_limited_api = plan.config.python_tag
            super().finalize_options()

        def write_wheelfile(self, distinfo_path, *args, **kwargs):
            super().write_wheelfile(distinfo_path, *args, **kwargs)
            if plan.install_id:  # RECORD is written afterwards, from the folder's files
                with open(os.path.join(distinfo_path, INSTALL_ID_FILE), "w") as fh:
                    fh.write(json.dumps({"install_id": plan.install_id}, sort_keys=True) + "\n")

        def run(self):
            if plan.hook is not None and not plan.install_id:
                plan.install_id = uuid.uuid4().hex
            if plan.mode == "prebuilt":
                os.makedirs(self.dist_dir, exist_ok=True)
                dest = os.path.join(self.dist_dir, os.path.basename(plan.prebuilt_wheel))
                if plan.install_id:
                    add_install_id(plan.prebuilt_wheel, dest, plan.install_id)
                else:
                    tmp = dest + ".part"
                    shutil.copyfile(plan.prebuilt_wheel, tmp)
                    os.replace(tmp, dest)
                print(f"mamba-ssm: using the prebuilt wheel {plan.prebuilt_wheel}")
            else:
                start = time.monotonic()
                try:
                    super().run()
                except BaseException:
                    if plan.hook is not None:  # doctor shows why the install has no kernels
                        _note_build(plan, time.monotonic() - start, failed=True)
                        record_decision(plan.hook, plan.outcome, "error")
                    raise
                _note_build(plan, time.monotonic() - start)
            if plan.hook is not None:
                record_decision(plan.hook, plan.outcome, plan.final_mode, plan.install_id)

    cmdclass["bdist_wheel"] = bdist_wheel
    if plan.mode == "source":
        cmdclass["build_ext"] = make_build_ext(plan.config)
    return cmdclass


def _note_build(plan: Plan, seconds: float, failed: bool = False) -> None:
    """Put what this wheel is (source / pure Python), why and how long it took into the decision record
    (``build``), which doctor and the first fallback warning show (pip hides build output)."""
    details = getattr(plan.outcome, "details", None)
    record = details.get("record") if isinstance(details, dict) else None
    if isinstance(record, dict):
        record["build"] = {"mode": plan.mode, "reason": plan.reason, "seconds": round(seconds, 1),
                           "kernels": list(plan.config.kernels) if plan.config is not None else [],
                           "failed": failed}


def make_build_ext(cfg: BuildConfig) -> type:
    """torch's BuildExtension, writing the build-info header first and honouring the forced ABI."""
    from torch.utils.cpp_extension import BuildExtension

    class build_ext(BuildExtension):
        def __init__(self, *args, **kwargs):
            kwargs.setdefault("use_ninja", True)
            ninja_dir = os.path.dirname(cfg.ninja) if cfg.ninja else None
            if ninja_dir and shutil.which("ninja") is None:  # e.g. the target env's ninja under build isolation
                os.environ["PATH"] = ninja_dir + os.pathsep + os.environ.get("PATH", "")
            super().__init__(*args, **kwargs)

        def build_extensions(self):
            os.environ["MAX_JOBS"] = str(cfg.max_jobs)  # read by torch's ninja driver
            include = os.path.join(os.path.abspath(self.build_temp), "include")
            header = os.path.join(include, "mamba_ssm_build_info.h")
            info = cfg.build_info(git_commit=git_commit())
            write_if_changed(header, buildinfo.render_header(info))
            for ext in self.extensions:
                if include not in ext.include_dirs:
                    ext.include_dirs.insert(0, include)
                if header not in ext.depends:
                    ext.depends.append(header)
            print(
                f"mamba-ssm: building {EXT_NAME} ({'+'.join(cfg.kernels)}) against torch {cfg.torch.version}"
                + (f", nvcc {cfg.nvcc[0]}.{cfg.nvcc[1]}, SASS {','.join(cfg.arch_spec.sass) or '-'}, "
                   f"PTX {','.join(cfg.arch_spec.ptx) or '-'} ({cfg.arch_source})" if cfg.arch_spec else "")
                + (f", gfx {','.join(cfg.gfx_archs)} ({cfg.gfx_source})" if cfg.gfx_archs else "")
                + f", MAX_JOBS={cfg.max_jobs}, cxx11 ABI={int(cfg.cxx11_abi)}"
                + (f", stable ABI (torch >= {cfg.torch_abi_floor})" if cfg.torch_abi == "stable" else ", classic ABI")
            )
            for note in cfg.notes:
                print(f"mamba-ssm: {note}")
            super().build_extensions()

        def _add_gnu_cpp_abi_flag(self, extension):  # older torch adds torch's ABI; forced ABI wins
            parent = getattr(super(), "_add_gnu_cpp_abi_flag", None)
            if parent is not None:
                parent(extension)
            if cfg.force_cxx11_abi:
                args = extension.extra_compile_args
                for key in (("cxx", "nvcc") if isinstance(args, dict) else (None,)):
                    flags = args[key] if key else args
                    flags[:] = [f for f in flags if "_GLIBCXX_USE_CXX11_ABI=0" not in f]

    return build_ext


def make_extension(cfg: BuildConfig):
    """The ``mamba_ssm._C`` Extension (py_limited_api, sources, flags) for ``cfg``."""
    from torch.utils import cpp_extension

    kwargs = dict(
        name=EXT_NAME,
        sources=cfg.sources,
        include_dirs=[os.path.join(ROOT, CSRC)],
        define_macros=list(cfg.define_macros),
        py_limited_api=True,
        depends=sorted(glob.glob(os.path.join(CSRC, "*.h")) + glob.glob(os.path.join(CSRC, "*.cuh"))),
    )
    if not cfg.torch_defines_limited_api:  # torch >= 2.7 passes -DPy_LIMITED_API itself
        kwargs["define_macros"].append(("Py_LIMITED_API", cfg.limited_api))
    if cfg.gpu:
        return cpp_extension.CUDAExtension(
            extra_compile_args={"cxx": list(cfg.cxx_flags), "nvcc": list(cfg.gpu_flags)}, **kwargs
        )
    return cpp_extension.CppExtension(extra_compile_args={"cxx": list(cfg.cxx_flags)}, **kwargs)


def setup_kwargs(plan: Plan, version: str) -> dict:
    """Arguments to ``setuptools.setup`` for ``plan``."""
    kw = dict(
        version=version,
        packages=find_packages(include=[PACKAGE, f"{PACKAGE}.*"]),
        package_data={PACKAGE: ["_install/*.json", "py.typed"]},
        include_package_data=False,
        zip_safe=False,
        cmdclass=make_cmdclass(plan),
        install_requires=["torch", "packaging"],  # pyproject.toml: dependencies are dynamic
    )
    if plan.mode == "source":
        kw["install_requires"] = [torch_requirement(plan.config), "packaging"]
        kw["ext_modules"] = [make_extension(plan.config)]
        kw["options"] = {"bdist_wheel": {"py_limited_api": plan.config.python_tag}}
    return kw
