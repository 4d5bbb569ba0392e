#!/usr/bin/env python3
"""wordcount, an example program lambda: atf runs it as any executable, the payload JSON on stdin
({"text": "..."}) and the result JSON on stdout ({"words": N}). Exit 0 is success, 75 asks for
another attempt, any other code is a fatal failure whose stderr becomes the task's error.

Its registry entry (lambdas.json) names it with "program": atf dev runs it from there, and on
AWS its ECS executor's image carries it (infra/executor/Dockerfile), on a base with Python.
"""
import json
import sys

try:
    text = json.load(sys.stdin)["text"]
    if not isinstance(text, str):
        raise TypeError
except (ValueError, KeyError, TypeError):
    print('payload must be {"text": "..."}', file=sys.stderr)
    sys.exit(1)
json.dump({"words": len(text.split())}, sys.stdout)
