"""Finds the classes protoc generated from proto/tracesan/v1/tracesan.proto.

The package carries the module in ``_generated/`` (checked in, regenerated
by ``make update-python-pb2``; tests/integration_python_venv.sh fails when
it no longer matches the schema), so an installed package needs nothing
else. ``make`` also writes a fresh one to
``BUILD/clients/python/generated/tracesan/v1/tracesan_pb2.py``, for
working on the schema. The module is loaded

1. from ``$TRACESAN_PB2_DIR`` (the directory given to ``--python_out``)
   when the variable is set: the module must then be there;
2. else from ``_generated/`` inside this package.
"""

import importlib.util
import os
import pathlib
import sys

ENVIRONMENT_VARIABLE = "TRACESAN_PB2_DIR"
_MODULE_PATH = pathlib.Path("tracesan", "v1", "tracesan_pb2.py")
_MODULE_NAME = "tracesan_client.tracesan_pb2"


def _load_file(path):
    spec = importlib.util.spec_from_file_location(_MODULE_NAME, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[_MODULE_NAME] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[_MODULE_NAME]
        raise
    return module


def load():
    """The generated module; ImportError saying where it was looked for."""
    if _MODULE_NAME in sys.modules:
        return sys.modules[_MODULE_NAME]
    directory = os.environ.get(ENVIRONMENT_VARIABLE)
    if directory:
        path = pathlib.Path(directory) / _MODULE_PATH
        if not path.is_file():
            raise ImportError(
                f"{ENVIRONMENT_VARIABLE}={directory}, but {path} does not "
                "exist: run make in that build directory")
        return _load_file(path)
    path = pathlib.Path(__file__).resolve().parent / "_generated" / _MODULE_PATH
    if not path.is_file():
        raise ImportError(
            f"{path} is missing from the package: reinstall it, or set "
            f"{ENVIRONMENT_VARIABLE} to a build's clients/python/generated")
    return _load_file(path)
