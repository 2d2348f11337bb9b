"""Build hook of the packd package (metadata lives in pyproject.toml).

build_py generates the protobuf/gRPC stubs from proto/packd/v1/packd.proto
into the built package with protoc + grpc_python_plugin (packd/_gen.py), so
installed packages carry stubs that match the proto they were built from.
When PACKD_LIB or PACKD_BUILD_DIR names a built libpackd.so, it is copied
next to the package for the embedded mode (packd.Client.local()); likewise
libpackd_gpu.so (PACKD_GPU_LIB or $PACKD_BUILD_DIR/gpu) for packd.gpu.
"""

import importlib.util
import os
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


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
        # The embedded planner and, when built, the GPU agent's library
        # (packd.gpu) travel with the package.
        for env, subdir, name in (("PACKD_LIB", "server", "libpackd.so"), ("PACKD_GPU_LIB", "gpu", "libpackd_gpu.so")):
            lib = _built_library(env, subdir, name)
            if lib is not None:
                shutil.copy2(lib, pkg / name)


setup(cmdclass={"build_py": BuildPyWithStubs})
