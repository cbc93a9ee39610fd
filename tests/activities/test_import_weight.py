"""The exporter imports only the openai- and jsonschema-free part of activities
(payload shapes, the delta bus): importing it loads neither package."""

import subprocess
import sys


def test_the_exporter_loads_neither_openai_nor_jsonschema():
    probe = ("import sys, observation.exporter; "
             "print(sorted({'openai', 'jsonschema', 'mcp'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"
