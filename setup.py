"""The optional C kernels (``eval_pipeline/_tagscan.c``, ``eval_pipeline/_jsonlines.c``);
everything else is in pyproject.toml.

``optional=True``: an install without a C compiler or Python headers still succeeds, and
the stages use their numpy / pyarrow code instead (``eval_pipeline/tagscan.py``).
"""

from setuptools import Extension, setup

setup(ext_modules=[
    Extension("eval_pipeline._tagscan", ["eval_pipeline/_tagscan.c"],
              optional=True, extra_compile_args=["-O2"]),
    Extension("eval_pipeline._jsonlines", ["eval_pipeline/_jsonlines.c"],
              optional=True, extra_compile_args=["-O2"]),
])
