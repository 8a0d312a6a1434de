"""Build the carmy package against the libcarmy pkg-config finds.

    pip install --no-build-isolation bindings/python

finds an installed libcarmy (make install), or a build tree's when
PKG_CONFIG_PATH names it (libcarmy-uninstalled.pc); the module then finds
the library at run time where pkg-config said it is. Needs setuptools,
pkg-config and msgpack (Debian: python3-setuptools, pkg-config,
python3-msgpack); nothing is fetched from a package index.
"""
import shlex
import subprocess

from setuptools import Extension, setup


def pkg_config(*args):
    try:
        out = subprocess.run(["pkg-config", *args, "libcarmy"], check=True,
                             capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        raise SystemExit("pkg-config libcarmy failed (%s): install libcarmy, "
                         "or set PKG_CONFIG_PATH to a Carmy build directory"
                         % e)
    return shlex.split(out)


def flags(prefix, words):
    return [w[len(prefix):] for w in words if w.startswith(prefix)]


cflags = pkg_config("--cflags")
libs = pkg_config("--libs")
libdirs = flags("-L", libs)

setup(
    name="carmy",
    version=pkg_config("--modversion")[0],
    description="Safe retries for AI agents' tool calls (libcarmy for Python)",
    long_description=open("README.md").read(),
    long_description_content_type="text/markdown",
    license="see LICENSE in the Carmy source",
    packages=["carmy"],
    package_data={"carmy": ["__init__.pyi", "py.typed"]},
    python_requires=">=3.8",
    install_requires=["msgpack"],
    ext_modules=[Extension(
        "carmy._carmy", ["carmy/_carmy.c"],
        include_dirs=flags("-I", cflags),
        library_dirs=libdirs,
        runtime_library_dirs=libdirs,
        libraries=flags("-l", libs),
    )],
)
