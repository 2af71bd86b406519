"""Ships ``hangscope-probe.pth`` at the top of site-packages, where Python's ``site`` runs it.

setuptools has no declarative way to put a file at the root of purelib: ``data-files`` go under
the ``data`` scheme (``sys.prefix``), and package data stays inside the package. So ``build_py``
copies the file from ``hangscope/probe/`` to the root of its output: for a wheel that is
``build_lib``, which becomes the wheel's root (site-packages); for an editable install (PEP 660),
where build_lib is thrown away, it is the unpacked editable wheel (``install_lib``), next to
setuptools' own ``__editable__.*.pth``. The optional C extension (``hangscope/_frscan.c``) is
declared here too. Everything else is in pyproject.toml.
"""

import os
import shutil

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

PTH = "hangscope-probe.pth"
SOURCE = os.path.join("hangscope", "probe", PTH)


class build_py_with_pth(build_py):  # noqa: N801 - setuptools' command naming
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            target = self.get_finalized_command("install").install_lib
        else:
            target = self.build_lib
        os.makedirs(target, exist_ok=True)
        shutil.copyfile(SOURCE, os.path.join(target, PTH))
        self._pth_output = os.path.join(target, PTH)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        outputs = list(super().get_outputs(include_bytecode))
        if not getattr(self, "editable_mode", False):
            outputs.append(os.path.join(self.build_lib, PTH))
        return outputs


# The flight-recorder pickle reader in C (hangscope/_frscan.c): optional, so an install without a
# C compiler or Python's headers still succeeds, and then dumps are unpickled as before.
FRSCAN = Extension("hangscope._frscan", sources=["hangscope/_frscan.c"], optional=True,
                   extra_compile_args=["-O2", "-std=c99"])

setup(cmdclass={"build_py": build_py_with_pth}, ext_modules=[FRSCAN])
