# The C++ extension (csrc/python/module.cpp), for mypy: its functions are not typed here.
from typing import Any

def __getattr__(name: str) -> Any: ...
