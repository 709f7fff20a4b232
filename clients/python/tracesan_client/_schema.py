"""Finds the classes protoc generated from proto/tracesan/v1/tracesan.proto.

The module is a build product, not part of the source tree: ``make``
writes it to ``BUILD/clients/python/generated/tracesan/v1/tracesan_pb2.py``
(``protoc --python_out``). It is looked up, in order:

1. in ``$TRACESAN_PB2_DIR`` (the directory given to ``--python_out``); when
   the variable is set the module must be there;
2. in ``_generated/`` inside this package (an installed copy);
3. in ``clients/python/generated/`` next to this package (a build in the
   source tree);
4. as ``tracesan.v1.tracesan_pb2`` on ``sys.path`` (for instance after
   ``protoc --proto_path=proto --python_out=. proto/tracesan/v1/tracesan.proto``
   in the current directory).
"""

import importlib
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
    package = pathlib.Path(__file__).resolve().parent
    for directory in (package / "_generated", package.parent / "generated"):
        path = directory / _MODULE_PATH
        if path.is_file():
            return _load_file(path)
    try:
        return importlib.import_module("tracesan.v1.tracesan_pb2")
    except ImportError:
        pass
    raise ImportError(
        "tracesan_pb2 not found: build tracesan (make) and set "
        f"{ENVIRONMENT_VARIABLE}=BUILD/clients/python/generated, or run "
        "protoc --proto_path=proto --python_out=DIR "
        "proto/tracesan/v1/tracesan.proto and set it to DIR")
