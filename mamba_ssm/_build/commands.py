"""The setuptools side of a build: the ``bdist_wheel`` that hands over a prebuilt wheel (with the
install id added) or builds one, torch's ``BuildExtension`` writing the build-info header first, the
``mamba_ssm._C`` Extension, and the arguments to ``setuptools.setup``. torch is imported only for a
source build (``make_build_ext`` / ``make_extension``).
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import time
from typing import Any, Dict, Iterator

from setuptools import find_packages

# setuptools >= 70.1 ships bdist_wheel; setup.py checks for the build requirement (>= 77) before this loads
from setuptools.command.bdist_wheel import bdist_wheel as _bdist_wheel

from .._compat import buildinfo, versions
from .._install.record import INSTALL_ID_FILE, BuildNote, InstallMode, install_id_file_bytes, new_install_id
from .config import BuildConfig, git_commit, torch_requirement
from .errors import PreflightError
from .plan import BuildMode, BuildPlan, record_decision
from .settings import CSRC, EXT_NAME, PACKAGE, ROOT
from .toolkit import nvcc_version_of


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

    data = install_id_file_bytes(install_id)
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    tmp = dest + ".part"
    try:
        with zipfile.ZipFile(src) as zin, zipfile.ZipFile(tmp, "w") as zout:
            records = [
                i.filename
                for i in zin.infolist()
                if i.filename.count("/") == 1 and i.filename.endswith(".dist-info/RECORD")
            ]
            if len(records) != 1:
                raise PreflightError(f"the prebuilt wheel {src} has no single <name>.dist-info/RECORD")
            dist_info = records[0].rsplit("/", 1)[0]
            new_name = f"{dist_info}/{INSTALL_ID_FILE}"
            for info in zin.infolist():
                if info.filename == new_name:
                    continue
                payload = zin.read(info.filename)
                if info.filename == records[0]:
                    lines = [
                        l
                        for l in payload.decode("utf-8").splitlines()
                        if l and not l.startswith(new_name + ",")
                    ]
                    lines.insert(
                        max(0, len(lines) - 1)
                        if lines and lines[-1].startswith(records[0] + ",")
                        else len(lines),
                        f"{new_name},sha256={digest},{len(data)}",
                    )
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


def make_cmdclass(plan: BuildPlan) -> Dict[str, type]:
    """The setuptools command classes for ``plan``."""
    cmdclass: Dict[str, type] = {}

    class bdist_wheel(_bdist_wheel):  # noqa: N801 - a setuptools command class carries the command's name
        # Every wheel built with the resolver hook present carries a fresh install id, written into
        # its dist-info and into the install record (doctor matches the two).
        install_id = ""

        def finalize_options(self) -> None:
            if plan.mode is BuildMode.SOURCE and plan.config is not None:
                self.py_limited_api = plan.config.python_tag
                # The metadata a PEP 517 frontend prepared first (plan "metadata": no torch probed) requires
                # plain "torch"; the built wheel's METADATA must carry the build's torch requirement.
                self.dist_info_dir = None
            super().finalize_options()

        def write_wheelfile(self, wheelfile_base: str, *args: Any, **kwargs: Any) -> None:
            super().write_wheelfile(wheelfile_base, *args, **kwargs)  # wheelfile_base: the dist-info folder
            if self.install_id:  # RECORD is written afterwards, from the folder's files
                with open(os.path.join(wheelfile_base, INSTALL_ID_FILE), "wb") as fh:
                    fh.write(install_id_file_bytes(self.install_id))

        def run(self) -> None:
            if plan.hook is not None:
                self.install_id = new_install_id()
            note = None
            if plan.mode is BuildMode.PREBUILT and plan.prebuilt_wheel is not None:
                dist_dir = self.dist_dir or "dist"  # finalize_options set it ("dist" is its default)
                os.makedirs(dist_dir, exist_ok=True)
                dest = os.path.join(dist_dir, os.path.basename(plan.prebuilt_wheel))
                if self.install_id:
                    add_install_id(plan.prebuilt_wheel, dest, self.install_id)
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
                        failed = build_note(plan, time.monotonic() - start, failed=True)
                        record_decision(plan.hook, plan.outcome, InstallMode.ERROR, build=failed)
                    raise
                note = build_note(plan, time.monotonic() - start)
            mode = plan.final_mode
            if plan.hook is not None and mode is not None:
                record_decision(plan.hook, plan.outcome, mode, self.install_id, build=note)

    cmdclass["bdist_wheel"] = bdist_wheel
    if plan.mode is BuildMode.SOURCE and plan.config is not None:
        cmdclass["build_ext"] = make_build_ext(plan.config)
    return cmdclass


def build_note(plan: BuildPlan, seconds: float, failed: bool = False) -> BuildNote:
    """What this wheel is (source / pure Python), why and how long it took, for the install record
    (``build``), which doctor and the first fallback warning show (pip hides build output)."""
    return BuildNote(
        mode=str(plan.mode),
        reason=plan.reason,
        seconds=round(seconds, 1),
        kernels=tuple(plan.config.kernels) if plan.config is not None else (),
        failed=failed,
    )


@contextlib.contextmanager
def torch_cuda_check(cfg: BuildConfig) -> Iterator[None]:
    """While the body runs, torch's ``cpp_extension._check_cuda_version`` as ``cfg`` needs it.

    Torch's check refuses an nvcc whose CUDA major differs from ``torch.version.cuda``. That holds for a
    classic build (it links torch's CUDA libraries), which keeps the check unchanged. A stable-ABI build
    reaches torch only through the LibTorch stable C shim: its kernels and the CUDA runtime it links
    (``libcudart.so.<major>``) are nvcc's, and the preflight (``config.resolve_stable_cuda_major``,
    ``MAMBA_STABLE_CUDA_MAJOR``) has already checked nvcc's major and the host compiler against nvcc
    (``toolkit.check_host_compiler``). For such a build with nvcc's major != torch's, torch's check is
    replaced by ours: the nvcc under ``cpp_extension.CUDA_HOME`` (the one torch compiles with) must be
    the one the preflight resolved; a ``RuntimeError`` naming both otherwise. Same majors: torch's check.
    """
    from torch.utils import cpp_extension

    torch_cuda = cfg.torch.cuda
    if cfg.torch_abi != versions.TorchAbi.STABLE or cfg.nvcc is None or not torch_cuda:
        yield
        return
    if cfg.nvcc[0] == versions.parse_cuda_version(torch_cuda)[0]:
        yield
        return
    original = cpp_extension._check_cuda_version

    def check_stable(compiler_name: str, compiler_version: Any) -> None:
        home = cpp_extension.CUDA_HOME
        if not home:
            raise RuntimeError(cpp_extension.CUDA_NOT_FOUND_MESSAGE)
        got, _ = nvcc_version_of(os.path.join(home, "bin", "nvcc"))
        want = tuple(cfg.nvcc or ())
        if tuple(got) != want:
            raise RuntimeError(
                f"torch compiles with the nvcc of CUDA_HOME={home}, CUDA {got[0]}.{got[1]}, but the preflight "
                f"resolved nvcc {'.'.join(map(str, want))} ({cfg.cuda_home}) for this stable-ABI build, which "
                "its build info records. Fix: set CUDA_HOME to that toolkit"
            )

    cpp_extension._check_cuda_version = check_stable
    try:
        yield
    finally:
        cpp_extension._check_cuda_version = original


def make_build_ext(cfg: BuildConfig) -> type:
    """torch's BuildExtension, writing the build-info header first and honouring the forced ABI."""
    from torch.utils.cpp_extension import BuildExtension

    class build_ext(BuildExtension):  # noqa: N801 - the setuptools command's name
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.setdefault("use_ninja", True)
            ninja_dir = os.path.dirname(cfg.ninja) if cfg.ninja else None
            if (
                ninja_dir and shutil.which("ninja") is None
            ):  # e.g. the target env's ninja under build isolation
                os.environ["PATH"] = ninja_dir + os.pathsep + os.environ.get("PATH", "")
            super().__init__(*args, **kwargs)

        def build_extensions(self) -> None:
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
                + (
                    f", nvcc {cfg.nvcc[0]}.{cfg.nvcc[1]}, SASS {','.join(cfg.arch_spec.sass) or '-'}, "
                    f"PTX {','.join(cfg.arch_spec.ptx) or '-'} ({cfg.arch_source})"
                    if cfg.arch_spec and cfg.nvcc
                    else ""
                )
                + (f", gfx {','.join(cfg.gfx_archs)} ({cfg.gfx_source})" if cfg.gfx_archs else "")
                + f", MAX_JOBS={cfg.max_jobs}, cxx11 ABI={int(cfg.cxx11_abi)}"
                + (
                    f", stable ABI (torch >= {cfg.torch_abi_floor})"
                    if cfg.torch_abi == versions.TorchAbi.STABLE
                    else ", classic ABI"
                )
            )
            for note in cfg.notes:
                print(f"mamba-ssm: {note}")
            with torch_cuda_check(cfg):
                super().build_extensions()

        def _add_gnu_cpp_abi_flag(self, extension: Any) -> None:  # older torch adds torch's ABI; forced wins
            parent = getattr(super(), "_add_gnu_cpp_abi_flag", None)
            if parent is not None:
                parent(extension)
            if cfg.force_cxx11_abi:
                args = extension.extra_compile_args
                for key in ("cxx", "nvcc") if isinstance(args, dict) else (None,):
                    flags = args[key] if key else args
                    flags[:] = [f for f in flags if "_GLIBCXX_USE_CXX11_ABI=0" not in f]

    return build_ext


def make_extension(cfg: BuildConfig) -> Any:
    """The ``mamba_ssm._C`` Extension (py_limited_api, sources, flags) for ``cfg``."""
    from torch.utils import cpp_extension

    macros = list(cfg.define_macros)
    if not cfg.torch_defines_limited_api:  # torch >= 2.7 passes -DPy_LIMITED_API itself
        macros.append(("Py_LIMITED_API", cfg.limited_api))
    kwargs: dict[str, Any] = dict(
        name=EXT_NAME,
        sources=cfg.sources,
        include_dirs=[os.path.join(ROOT, CSRC)],
        define_macros=macros,
        py_limited_api=True,
        depends=sorted(glob.glob(os.path.join(CSRC, "*.h")) + glob.glob(os.path.join(CSRC, "*.cuh"))),
    )
    # torch's cpp_extension.CUDAExtension / CppExtension carry no annotations (they return a setuptools
    # Extension)
    if cfg.gpu:
        return cpp_extension.CUDAExtension(  # type: ignore[no-untyped-call]
            extra_compile_args={"cxx": list(cfg.cxx_flags), "nvcc": list(cfg.gpu_flags)}, **kwargs
        )
    return cpp_extension.CppExtension(  # type: ignore[no-untyped-call]
        extra_compile_args={"cxx": list(cfg.cxx_flags)}, **kwargs
    )


#: What every wheel requires besides torch: ``packaging`` (the loader's and resolver's version logic) and
#: ``einops``, which upstream mamba-ssm's install brings and its users' scripts import. The wheel's torch
#: requirement comes first (:func:`install_requires`).
RUNTIME_REQUIREMENTS = ("packaging", "einops")


def install_requires(plan: BuildPlan) -> list[str]:
    """The wheel's ``Requires-Dist``: the torch its ``_C`` serves (``torch>=2.10`` for a stable-ABI build,
    ``torch==X.Y.*`` for a classic one; plain ``torch`` without kernels or for metadata), then
    :data:`RUNTIME_REQUIREMENTS`."""
    torch = torch_requirement(plan.config) if plan.mode is BuildMode.SOURCE and plan.config else "torch"
    return [torch, *RUNTIME_REQUIREMENTS]


def setup_kwargs(plan: BuildPlan, version: str) -> dict[str, Any]:
    """Arguments to ``setuptools.setup`` for ``plan``."""
    kw: dict[str, Any] = dict(
        version=version,
        packages=find_packages(include=[PACKAGE, f"{PACKAGE}.*"]),
        package_data={PACKAGE: ["_install/*.json", "py.typed"]},
        include_package_data=False,
        zip_safe=False,
        cmdclass=make_cmdclass(plan),
        install_requires=install_requires(plan),  # pyproject.toml: dependencies are dynamic
    )
    if plan.mode is BuildMode.SOURCE and plan.config is not None:
        kw["ext_modules"] = [make_extension(plan.config)]
        kw["options"] = {"bdist_wheel": {"py_limited_api": plan.config.python_tag}}
    return kw
