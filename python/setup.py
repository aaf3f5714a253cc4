"""Build of the swml package: the pure-Python package plus libswml.so,
built from the Go sources of the repository this directory sits in."""

import os
import shutil
import subprocess

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


class BuildWithGo(build_py):
    """build_py, then go build -buildmode=c-shared into the built package."""

    def run(self):
        super().run()
        if not os.path.exists(os.path.join(ROOT, "cmd", "libswml")):
            raise SystemExit(f"swml: {ROOT} is not the swml-rdma repository (no cmd/libswml): "
                             "build the package from the repository's python/ directory")
        go = shutil.which("go")
        if go is None:
            raise SystemExit("swml: building libswml.so needs the Go toolchain (go 1.26) on PATH")
        out = os.path.join(os.path.abspath(self.build_lib), "swml", "libswml.so")
        os.makedirs(os.path.dirname(out), exist_ok=True)
        cmd = [go, "build", "-buildmode=c-shared", "-trimpath", "-o", out]
        tags = os.environ.get("SWML_GO_TAGS", "")
        if tags:
            cmd += ["-tags", tags]
        cmd.append("./cmd/libswml")
        env = dict(os.environ, CGO_ENABLED="1")
        print("swml: " + " ".join(cmd), flush=True)
        subprocess.check_call(cmd, cwd=ROOT, env=env)
        header = out[:-3] + ".h"
        if os.path.exists(header):
            os.remove(header)


class BinaryDistribution(Distribution):
    """The wheel holds a native library: tag it for this platform."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildWithGo}, distclass=BinaryDistribution)
