"""tests/models: the helpers next to the tests (hf_convert) importable as plain modules."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)
