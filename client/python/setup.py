"""Build hook of the packd package (metadata lives in pyproject.toml).

build_py generates the protobuf/gRPC stubs from proto/packd/v1/packd.proto
into the built package with protoc + grpc_python_plugin (packd/_gen.py), so
installed packages carry stubs that match the proto they were built from.

It also puts the native libraries next to the package: libpackd.so (the
embedded planner, packd.Client.local()) and libpackd_gpu.so (packd.gpu's
host backend). Where they come from, first match wins:
1. PACKD_LIB / PACKD_GPU_LIB, or $PACKD_BUILD_DIR/server and /gpu: a build
   made beforehand is copied;
2. otherwise the repository's CMake project (the checkout this folder sits
   in, or PACKD_SOURCE_DIR) is configured and only those two targets are
   built, in the setuptools build folder; its dependencies are the
   service's (scripts/bootstrap.sh installs them);
3. PACKD_NO_NATIVE=1 skips the native build: the package then plans only
   through a server, or with PACKD_LIB set at run time.

A wheel with the native libraries is tagged py3-none-<platform>: Python
loads them with ctypes, so one wheel serves every Python 3 of the platform,
while its platform tag says it holds machine code (scripts/build-wheel.sh
turns linux_x86_64 into a manylinux tag with auditwheel). Without them
(PACKD_NO_NATIVE=1) the wheel is pure: py3-none-any.
"""

import importlib.util
import os
import shutil
import subprocess
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

try:  # setuptools >= 70.1 has bdist_wheel itself; older ones use the wheel package's.
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:
    try:
        from wheel.bdist_wheel import bdist_wheel
    except ImportError:
        bdist_wheel = None

HERE = Path(__file__).resolve().parent


def _no_native():
    """True when PACKD_NO_NATIVE asks for a package without libpackd.so."""
    return os.environ.get("PACKD_NO_NATIVE", "") in ("1", "true", "yes")


def _load_gen():
    spec = importlib.util.spec_from_file_location("packd_gen_for_build", HERE / "packd" / "_gen.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _built_library(env, subdir, name):
    """The library named by env (PACKD_LIB, PACKD_GPU_LIB) or found in
    $PACKD_BUILD_DIR/subdir, or None."""
    lib = os.environ.get(env)
    if not lib and os.environ.get("PACKD_BUILD_DIR"):
        lib = os.path.join(os.environ["PACKD_BUILD_DIR"], subdir, name)
    return Path(lib) if lib and Path(lib).is_file() else None


def _source_dir():
    """The repository root to build the native libraries from, or None."""
    env = os.environ.get("PACKD_SOURCE_DIR")
    root = Path(env) if env else HERE.parents[1]
    return root if (root / "CMakeLists.txt").is_file() and (root / "server" / "planner").is_dir() else None


def _cmake_build(build_temp):
    """Builds libpackd.so and libpackd_gpu.so with the repository's CMake
    project; returns {file name: path}. SystemExit with the tool's output
    when configuring or building fails."""
    root = _source_dir()
    if root is None:
        raise SystemExit(
            "packd: no repository to build libpackd.so from (looked at "
            f"{os.environ.get('PACKD_SOURCE_DIR') or HERE.parents[1]}); set PACKD_SOURCE_DIR to the checkout, "
            "PACKD_BUILD_DIR to a CMake build, or PACKD_NO_NATIVE=1 to install without the embedded planner"
        )
    cmake = shutil.which("cmake")
    if cmake is None:
        raise SystemExit("packd: cmake is needed to build libpackd.so (apt-get install cmake, or set PACKD_NO_NATIVE=1)")
    out = Path(build_temp).resolve() / "packd-native"
    configure = [cmake, "-S", str(root), "-B", str(out), "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
                 "-DPK_BUILD_TESTS=OFF", "-DPK_BUILD_BENCH=OFF", "-DPK_GPU_CUDA=OFF"]
    jobs = str(os.cpu_count() or 1)
    for cmd in (configure, [cmake, "--build", str(out), "-j", jobs, "--target", "packd", "packd_gpu"]):
        print("packd:", " ".join(cmd), flush=True)
        res = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if res.returncode != 0:
            raise SystemExit(f"packd: building the native libraries failed:\n{res.stdout[-4000:]}")
    return {"libpackd.so": out / "server" / "libpackd.so", "libpackd_gpu.so": out / "gpu" / "libpackd_gpu.so"}


class BuildPyWithStubs(build_py):
    def run(self):
        super().run()
        pkg = Path(self.build_lib) / "packd"
        gen = _load_gen()
        proto_dir = gen.default_proto_dir()
        if proto_dir is None:
            # Building from a copy outside the repository: PACKD_PROTO_DIR
            # must name the proto folder.
            raise SystemExit("packd: set PACKD_PROTO_DIR to the repository's proto/ folder")
        gen.generate(pkg / "_proto", proto_dir)
        # The embedded planner and the GPU agent's library travel with the
        # package: from a build made beforehand, else built here.
        given = {name: _built_library(env, subdir, name)
                 for env, subdir, name in (("PACKD_LIB", "server", "libpackd.so"),
                                           ("PACKD_GPU_LIB", "gpu", "libpackd_gpu.so"))}
        if given["libpackd.so"] is None and not _no_native():
            built = _cmake_build(self.get_finalized_command("build").build_temp)
            given = {name: given[name] or (built[name] if built[name].is_file() else None) for name in given}
        for name, lib in given.items():
            if lib is not None:
                shutil.copy2(lib, pkg / name)


class NativeDistribution(Distribution):
    """A distribution that carries machine code unless PACKD_NO_NATIVE is
    set, so that wheels get a platform tag and install into platlib."""

    def has_ext_modules(self):
        return not _no_native()


CMDCLASS = {"build_py": BuildPyWithStubs}

if bdist_wheel is not None:

    class BdistWheelAnyPython(bdist_wheel):
        """Tags a wheel with native libraries py3-none-<platform>: they are
        loaded with ctypes, never imported as extension modules, so they
        depend on the platform and not on the Python version or ABI."""

        def get_tag(self):
            python, abi, plat = super().get_tag()
            if self.root_is_pure:
                return python, abi, plat
            return "py3", "none", plat

    CMDCLASS["bdist_wheel"] = BdistWheelAnyPython

setup(cmdclass=CMDCLASS, distclass=NativeDistribution)
